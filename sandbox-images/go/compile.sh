# Builds /build/main from Go sources of package main (run by the codegen runner as the
# program's uid, cwd /work): `go build` without modules or cgo, its cache in /tmp (scrubbed
# after every run, like everything of the program).
set -e
exec /usr/bin/go build -trimpath -o /build/main "$@"
