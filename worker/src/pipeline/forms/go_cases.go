// The test file of generated Go: a second file of package main beside the program (the image's
// documented test form), rendered by worker/src/pipeline/forms/go.rs, which appends
// codegenCases: one codegenRun per case, its inputs decoded from JSON into the parameters' own
// types (encoding/json), the function called with them in order.
//
// Each case runs in a goroutine under its timeout; what it returned (rendered as plain JSON
// data: nil slices as [], map keys as strings, NaN as a string), the error it returned (names
// "error" and its %T) or the panic it raised (names "panic" and its %T), or the timeout, is
// written as one JSON line to the report file, which the worker reads back and judges
// (forms/judge.rs). A case that never ends leaves its goroutine running; the process exits
// after the last case. What the functions print goes to /dev/null.
package main

import (
	codegenJSON "encoding/json"
	codegenFmt "fmt"
	codegenMath "math"
	codegenOS "os"
	codegenReflect "reflect"
	codegenTime "time"
)

type codegenInputError struct{ message string }

var codegenOut *codegenOS.File

// Set by the image's compile script in a final run (a main.go built for statement coverage):
// the code's statements and those that ran.
var codegenCoverage func() (int, int)

// codegenDecode decodes a case's input into the parameter's variable.
func codegenDecode(name, text string, into any) {
	if err := codegenJSON.Unmarshal([]byte(text), into); err != nil {
		panic(codegenInputError{codegenFmt.Sprintf("input %s does not fit its type: %v", name, err)})
	}
}

// codegenPlain is v as plain JSON data.
func codegenPlain(v codegenReflect.Value, depth int) any {
	if depth > 64 || !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case codegenReflect.Interface, codegenReflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return codegenPlain(v.Elem(), depth+1)
	case codegenReflect.Slice, codegenReflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = codegenPlain(v.Index(i), depth+1)
		}
		return out
	case codegenReflect.Map:
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			key := it.Key()
			var name string
			if key.CanInterface() {
				name = codegenFmt.Sprint(key.Interface())
			} else {
				name = key.String()
			}
			out[name] = codegenPlain(it.Value(), depth+1)
		}
		return out
	case codegenReflect.Struct:
		out := map[string]any{}
		for i := 0; i < v.NumField(); i++ {
			field := v.Type().Field(i)
			if !field.IsExported() {
				continue
			}
			name := field.Name
			if tag := field.Tag.Get("json"); tag != "" && tag != "-" {
				for j := 0; j < len(tag); j++ {
					if tag[j] == ',' {
						tag = tag[:j]
						break
					}
				}
				if tag != "" {
					name = tag
				}
			}
			out[name] = codegenPlain(v.Field(i), depth+1)
		}
		return out
	case codegenReflect.Float32, codegenReflect.Float64:
		f := v.Float()
		if codegenMath.IsNaN(f) || codegenMath.IsInf(f, 0) {
			return codegenFmt.Sprint(f)
		}
		return f
	case codegenReflect.Bool:
		return v.Bool()
	case codegenReflect.String:
		return v.String()
	case codegenReflect.Int, codegenReflect.Int8, codegenReflect.Int16, codegenReflect.Int32, codegenReflect.Int64:
		return v.Int()
	case codegenReflect.Uint, codegenReflect.Uint8, codegenReflect.Uint16, codegenReflect.Uint32, codegenReflect.Uint64, codegenReflect.Uintptr:
		return v.Uint()
	}
	return codegenFmt.Sprint(v.Type())
}

func codegenWrite(line map[string]any) {
	text, err := codegenJSON.Marshal(line)
	if err != nil {
		line["returned"] = codegenFmt.Sprint(line["returned"])
		text, _ = codegenJSON.Marshal(line)
	}
	codegenOut.Write(append(text, '\n'))
}

// codegenRun runs one case (call) under its timeout and writes what it did.
func codegenRun(function, index int, timeoutMs int64, call func() (any, error)) {
	done := make(chan map[string]any, 1)
	start := codegenTime.Now()
	go func() {
		line := map[string]any{}
		defer func() {
			if r := recover(); r != nil {
				if input, ok := r.(codegenInputError); ok {
					line["raised"] = []string{"CodegenInputError"}
					line["message"] = input.message
				} else {
					line["raised"] = []string{"panic", codegenFmt.Sprintf("%T", r)}
					line["message"] = codegenFmt.Sprint(r)
				}
			}
			done <- line
		}()
		value, err := call()
		if err != nil {
			line["raised"] = []string{"error", codegenFmt.Sprintf("%T", err)}
			line["message"] = err.Error()
			return
		}
		line["returned"] = codegenPlain(codegenReflect.ValueOf(value), 0)
	}()
	var line map[string]any
	select {
	case line = <-done:
	case <-codegenTime.After(codegenTime.Duration(timeoutMs) * codegenTime.Millisecond):
		line = map[string]any{"timeout": true}
	}
	line["function"] = function
	line["case"] = index
	line["ms"] = float64(codegenTime.Since(start).Microseconds()) / 1000
	codegenWrite(line)
}

func main() {
	out, err := codegenOS.OpenFile(codegenReport, codegenOS.O_WRONLY|codegenOS.O_CREATE|codegenOS.O_TRUNC, 0o600)
	if err != nil {
		panic(err)
	}
	codegenOut = out
	if null, err := codegenOS.OpenFile(codegenOS.DevNull, codegenOS.O_WRONLY, 0); err == nil {
		codegenOS.Stdout = null
	}
	codegenWrite(map[string]any{"nonce": codegenNonce})
	codegenCases()
	if codegenCoverage != nil {
		total, covered := codegenCoverage()
		codegenWrite(map[string]any{"coverage": map[string]any{"lines": total, "covered": covered}})
	}
	codegenOS.Exit(0)
}
