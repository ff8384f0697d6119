# Builds /build/main from Go sources of package main (run by the codegen runner as the
# program's uid, cwd /work): `go build` without modules or cgo, against the image's
# read-only build cache of the standard library (/opt/go-cache, see the Dockerfile; what the
# program's own packages would add to it is not kept). No -trimpath: the cache's entries
# were built without it, and would all miss.
#
# When the work directory holds .codegen-lint (proto::harness::LINT_FILE: the worker asks for
# generated code's quality report), `go vet` runs first and writes its findings over it (a
# finding never fails the compile), and main.go is built instrumented for statement coverage
# (`go tool cover`, its //line directives keep the compiler's positions main.go's) with a hook
# the worker's test file (package main) calls when set: codegenCoverage() -> (statements,
# covered). A main.go the tool cannot parse builds as it is. Other runs pay for neither.
#
# fuse-overlayfs (a Docker storage driver) now and then lists an entry of a large directory
# twice, which `go` reports as a "case-insensitive file name collision" of one name with
# itself (seen in the standard library's syscall/). That is the host's fault, never the
# program's: a go command that failed for it alone runs again, up to three times.
set -e
go_retrying() {
  for attempt in 1 2 3; do
    if /usr/bin/go "$@" 2>/build/.go-out; then
      cat /build/.go-out >&2
      return 0
    fi
    grep -qE 'collision: "([^"]+)" and "\1"' /build/.go-out || break
  done
  cat /build/.go-out >&2
  return 1
}
if [ -e /work/.codegen-lint ]; then
  go_retrying vet "$@" >/work/.codegen-lint 2>&1 || true
  mkdir -p /build/cover
  if [ "$#" -eq 2 ] &&
    /usr/bin/go tool cover -mode=set -var=codegenCover -o /build/cover/main.go "$1" 2>/dev/null; then
    cat >/build/cover/hook.go <<'HOOK'
package main

func init() {
	codegenCoverage = func() (int, int) {
		total, covered := 0, 0
		for i, n := range codegenCover.NumStmt {
			total += int(n)
			if codegenCover.Count[i] > 0 {
				covered += int(n)
			}
		}
		return total, covered
	}
}
HOOK
    # `go build` takes named files of one directory only.
    cp "$2" /build/cover/test.go
    go_retrying build -o /build/main /build/cover/main.go /build/cover/hook.go /build/cover/test.go
    exit
  fi
fi
go_retrying build -o /build/main "$@"
