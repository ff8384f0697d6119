'use strict';
// Transpiles /work/main.ts to /build/main.js for the JavaScript harness (run by the codegen
// runner as the program's uid, cwd /work):
//
//   node /opt/codegen/compile.js /work/main.ts
//
// Types are erased, not checked (as ts-node --transpile-only, tsx and esbuild run
// TypeScript): a syntax error is a compile error, a type error is not. Output: CommonJS,
// ES2022, which Node 20 runs as is.
const fs = require('fs');
const ts = require('typescript');

const [source] = process.argv.slice(2);
const text = fs.readFileSync(source, 'utf8');
const out = ts.transpileModule(text, {
  fileName: source,
  reportDiagnostics: true,
  compilerOptions: {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    esModuleInterop: true,
    sourceMap: false,
  },
});
const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
if (errors.length > 0) {
  for (const d of errors) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    if (d.file && d.start !== undefined) {
      const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
      process.stderr.write(`${source}(${line + 1},${character + 1}): error TS${d.code}: ${message}\n`);
    } else {
      process.stderr.write(`error TS${d.code}: ${message}\n`);
    }
  }
  process.exit(1);
}
fs.writeFileSync('/build/main.js', out.outputText);
