#!/usr/bin/env bash
# Builds (or reuses) the container image the container rows run in: Debian 12 minbase made with
# mmdebstrap and `docker import`ed into the daemon at $DOCKER_HOST. No registry is involved.
#
#   DOCKER_HOST=unix:///run/... scripts/containers/image.sh    # prints the image's tag
#   scripts/containers/image.sh --tarball                      # builds, prints the tarball's path
#
# The tarball is cached in $PSB_CONTAINERS_CACHE (default /var/cache/process-sandbox/containers),
# keyed by a hash of this script (the package list and hooks are in it) and the mirror: a change
# to what goes into the image makes a new one. The tag carries the same key, so a daemon that has
# already imported this image is not asked to import it again. Needs root (mmdebstrap's root mode,
# ownership in the image) and Debian's mirror for the first build.
set -euo pipefail
CACHE=${PSB_CONTAINERS_CACHE:-/var/cache/process-sandbox/containers}
MIRROR=${PSB_CONTAINERS_MIRROR:-http://deb.debian.org/debian}
DOCKER=${PSB_DOCKER:-docker}
# git, python3 and procps are what the suites run inside sandboxes (git repositories as
# carve-outs, python3 fixtures, ps); ca-certificates for git over https; passwd for useradd.
PKGS=git,procps,python3,ca-certificates,passwd
# The unprivileged user the user rows run as (`docker run --user 1000:1000`); git and ps want a
# passwd entry for the uid they run as.
USER_HOOK='chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash psbtest'
KEY=$( (cat "$0"; echo "$MIRROR") | sha256sum | cut -c1-16)
TAG=psb-deb12:$KEY
TAR=$CACHE/deb12-$KEY.tar
if [ "${1:-}" = --tarball ]; then
  [ -s "$TAR" ] && { echo "$TAR"; exit 0; }
# The tarball stays too: the Podman row imports the same one.
elif [ -s "$TAR" ] && "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9 # one build at a time; a second caller then finds the tarball
if [ ! -s "$TAR" ]; then
  echo "containers: building the image $TAG (mmdebstrap bookworm minbase, $MIRROR)" >&2
  rm -f "$CACHE"/deb12-*.tar.tmp
  # Files in /var/cache/apt and the lists are left out of the tarball: they are only download caches.
  mmdebstrap --variant=minbase --include="$PKGS" --aptopt='Acquire::Retries "3"' \
    --customize-hook="$USER_HOOK" \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    --format=tar bookworm "$TAR.tmp" "$MIRROR" >&2
  mv "$TAR.tmp" "$TAR"
  # Older images of this script are no longer wanted.
  find "$CACHE" -maxdepth 1 -name 'deb12-*.tar' ! -name "deb12-$KEY.tar" -delete
fi
[ "${1:-}" = --tarball ] && { echo "$TAR"; exit 0; }
"$DOCKER" import --message "process-sandbox test image (mmdebstrap bookworm minbase: $PKGS)" "$TAR" "$TAG" >/dev/null
echo "$TAG"
