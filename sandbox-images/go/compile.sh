# Builds /build/main from Go sources of package main (run by the codegen runner as the
# program's uid, cwd /work): `go build` without modules or cgo, against the image's
# read-only build cache of the standard library (/opt/go-cache, see the Dockerfile; what the
# program's own packages would add to it is not kept). No -trimpath: the cache's entries
# were built without it, and would all miss.
#
# When the work directory holds .codegen-lint (proto::harness::LINT_FILE: the worker asks for
# generated code's quality report), `go vet` runs first and writes its findings over it; a
# finding never fails the compile. Other runs pay for no vet.
set -e
if [ -e /work/.codegen-lint ]; then
  /usr/bin/go vet "$@" >/work/.codegen-lint 2>&1 || true
fi
exec /usr/bin/go build -o /build/main "$@"
