# shellcheck shell=bash
# Offline image bases: a Debian rootfs made by mmdebstrap from a package list, imported into
# the Docker engine (no registry needed). Sourced by sandbox-images/build and
# deploy/images/build, which define die and log.

# The Debian release of a rootfs: a folder's `suite` file beside its packages list, else this.
ROOTFS_SUITE=bookworm
rootfs_suite() {
  local file
  file="$(dirname "$1")/suite"
  if [ -f "$file" ]; then tr -d ' \t\n' <"$file"; else echo "$ROOTFS_SUITE"; fi
}
# Options for mmdebstrap apart from the package list; part of the base hash.
ROOTFS_OPTS=(
  --variant=essential
  # merged /usr via symlinks + usr-is-merged, instead of the usrmerge package
  # (which would pull in perl, ~55 MB)
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
)

# The packages every rootfs downloads, kept between builds (and shared by builds running at
# once) under $ROOTFS_CACHE (scripts/lib/rootfs-cache), so that a package common to several
# images (Python, gcc, libc6-dev) is fetched once. Not part of the base hash: it changes how,
# not what.
ROOTFS_CACHE=${ROOTFS_CACHE:-${ROOT:?}/.cluster/images/debs}
ROOTFS_CACHE_HOOKS=(
  --setup-hook="'$ROOT/scripts/lib/rootfs-cache' in '$ROOTFS_CACHE' \"\$1\""
  --customize-hook="'$ROOT/scripts/lib/rootfs-cache' out '$ROOTFS_CACHE' \"\$1\""
)

rootfs_sha() { sha256sum | cut -c1-16; }

# What a caller of rootfs_import adds (see there).
ROOTFS_HOOKS=()
ROOTFS_CHANGES=()

# A folder's own mmdebstrap options, one per line, in mmdebstrap-options beside its packages
# list (e.g. a hook a package's maintainer script needs); most folders have none.
rootfs_extra_opts_file() { echo "$(dirname "$1")/mmdebstrap-options"; }

# rootfs_hash PACKAGES_FILE [SETUP_SCRIPT]: hash of the mmdebstrap inputs (suite, options,
# package list, the setup script).
rootfs_hash() {
  local extra
  extra="$(rootfs_extra_opts_file "$1")"
  {
    rootfs_suite "$1"; printf '%s\n' "${ROOTFS_OPTS[@]}"; tr -s ' \t\n' '\n' <"$1" | sed '/^$/d' | sort -u
    if [ -f "$extra" ]; then cat "$extra"; fi
    if [ -n "${2:-}" ]; then printf 'setup\n'; cat "$2"; fi
  } | rootfs_sha
}

# rootfs_import NAME PACKAGES_FILE TAG WORKDIR [SETUP_SCRIPT]: mmdebstrap a rootfs with the
# packages listed in PACKAGES_FILE under WORKDIR, run SETUP_SCRIPT in it (chroot, /bin/sh, as
# root), then the caller's ROOTFS_HOOKS (mmdebstrap options, e.g. a customize hook that copies
# files in), import it as TAG with the caller's ROOTFS_CHANGES (`docker import --change`
# options; by default a label of the rootfs hash, the tag's, and PATH), delete the tar. Setup
# belongs here rather than in a Dockerfile RUN: on fuse-overlayfs every layer docker commits is
# found by walking the whole tree against its parent (a naive diff; 56 s of python-sci's build
# went on four such layers).
rootfs_import() {
  local name="$1" packages="$2" tag="$3" workdir="$4" setup="${5:-}" pkgs tmp suite
  suite="$(rootfs_suite "$packages")"
  command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap not found (apt-get install -y mmdebstrap)"
  local extra=() setup_hook=()
  if [ -f "$(rootfs_extra_opts_file "$packages")" ]; then
    mapfile -t extra < <(sed '/^$/d' "$(rootfs_extra_opts_file "$packages")")
  fi
  # After the cache's hook has taken the downloaded packages out: the setup may clean up.
  if [ -n "$setup" ]; then setup_hook=(--customize-hook="chroot \"\$1\" /bin/sh -s <'$setup'"); fi
  pkgs="$(tr -s ' \t\n' ',' <"$packages" | sed 's/^,//; s/,$//')"
  [ -n "$pkgs" ] || die "$name: empty packages list"
  mkdir -p "$workdir"
  tmp="$(mktemp -d "$workdir/$name-rootfs.XXXXXX")"
  log "$name: building rootfs with mmdebstrap ($suite, essential + $pkgs)"
  # The chroot lives under $workdir (TMPDIR), beside the package cache, so that the cache's
  # hooks hard-link instead of copying.
  if ! TMPDIR="$tmp" mmdebstrap --quiet "${ROOTFS_OPTS[@]}" "${extra[@]}" \
      "${ROOTFS_CACHE_HOOKS[@]}" "${setup_hook[@]}" "${ROOTFS_HOOKS[@]}" --include="$pkgs" \
      "$suite" "$tmp/rootfs.tar" >"$tmp/mmdebstrap.log" 2>&1; then
    cat "$tmp/mmdebstrap.log" >&2
    rm -rf "$tmp"
    die "$name: mmdebstrap failed"
  fi
  log "$name: importing rootfs ($(du -m "$tmp/rootfs.tar" | cut -f1) MB) as $tag"
  local changes=("${ROOTFS_CHANGES[@]}")
  if [ ${#changes[@]} -eq 0 ]; then
    changes=(--change "LABEL org.codegen.base-inputs=${tag##*:}"
      --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin')
  fi
  if ! docker import "${changes[@]}" "$tmp/rootfs.tar" "$tag" >/dev/null; then
    rm -rf "$tmp"
    die "$name: docker import failed"
  fi
  rm -rf "$tmp"
}

# rootfs_prefetch NAME SUITE PACKAGES WORKDIR: download into $ROOTFS_CACHE every package that a
# rootfs of PACKAGES (comma-separated) on SUITE installs, without building it: a build that
# follows finds them there. It runs where the downloads cost nothing else: beside the CPU-bound
# `cargo build` of a fresh machine. The extract variant is mmdebstrap's download-only mode
# (apt resolves `?essential` and the packages as the essential variant does, with no dpkg run);
# usr-is-merged is what the merged-usr hook adds later.
rootfs_prefetch() {
  local name="$1" suite="$2" pkgs="$3" workdir="$4" tmp
  command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap not found (apt-get install -y mmdebstrap)"
  mkdir -p "$workdir"
  tmp="$(mktemp -d "$workdir/$name-prefetch.XXXXXX")"
  if ! TMPDIR="$tmp" mmdebstrap --quiet --variant=extract \
      --setup-hook="'$ROOT/scripts/lib/rootfs-cache' in '$ROOTFS_CACHE' \"\$1\"" \
      --extract-hook="'$ROOT/scripts/lib/rootfs-cache' out '$ROOTFS_CACHE' \"\$1\"" \
      --include='?essential' --include="usr-is-merged,$pkgs" \
      "$suite" /dev/null >"$tmp/mmdebstrap.log" 2>&1; then
    cat "$tmp/mmdebstrap.log" >&2
    rm -rf "$tmp"
    die "$name: mmdebstrap (prefetch) failed"
  fi
  rm -rf "$tmp"
}
