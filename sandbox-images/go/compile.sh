# Builds /build/main from Go sources of package main (run by the codegen runner as the
# program's uid, cwd /work): `go build` without modules or cgo, against the image's
# read-only build cache of the standard library (/opt/go-cache, see the Dockerfile; what the
# program's own packages would add to it is not kept). No -trimpath: the cache's entries
# were built without it, and would all miss.
set -e
exec /usr/bin/go build -o /build/main "$@"
