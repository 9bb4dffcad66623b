#!/usr/bin/env bash
# A cache of the compiled dependencies of the release build (about 1 GB), so that a clean
# clone compiles only the workspace's own crates: on 2 cores the dependencies are half of
# a clean build (about 6 of 12 minutes). The same idea as CI caches of Rust projects
# (e.g. Swatinem/rust-cache): keep target/release without the workspace crates, keyed by
# Cargo.lock, the root Cargo.toml (profiles) and the compiler.
#   scripts/build-cache.sh restore   a tree with no release build yet (a clean clone) gets
#                                    the cached dependency artifacts; cargo still checks
#                                    each one and rebuilds what is stale
#   scripts/build-cache.sh save      after a build: replaces the cache if it was made for
#                                    another key (or is missing); seconds, or nothing
#   scripts/build-cache.sh save --tests   after a build of the tests too (`make test`): also
#                                    replaces a cache of the same key that a build of the
#                                    binaries alone saved (`make setup`), which lacks the
#                                    tests' dev-dependencies (proptest, ndarray, rcgen...)
# The cache lives in ${EMBEDWIRE_CACHE:-~/.cache/embedwire}/build-cache; deleting it only
# costs the next clean build its dependencies. EMBEDWIRE_BUILD_CACHE=0 turns both off.
# Callers ignore its exit code: the cache only saves time, a failure must not fail a build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE_ROOT="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}/build-cache"
TREE=target/release
# What cargo reuses: compiled crates, build-script outputs, and their fingerprints.
PARTS=(deps build .fingerprint)

[[ "${EMBEDWIRE_BUILD_CACHE:-1}" != 0 ]] || exit 0

key() {
  { cat Cargo.lock Cargo.toml; rustc -vV; } | sha256sum | cut -c1-16
}

# The workspace's own artifacts: never cached (a clone's sources are newer than any cached
# artifact, so cargo would rebuild them anyway; they only cost space). Registry crates that
# merely start alike (postgres-types, postgres-protocol) keep their own names.
drop_workspace_artifacts() {
  local dir=$1
  find "$dir/deps" -maxdepth 1 -regextype posix-extended \
    \( -regex '.*/(lib)?embedwire[-_][^/]*' -o -regex '.*/(it|quick|clusters)-[0-9a-f]{16}(\.d)?' \) -delete
  find "$dir/.fingerprint" "$dir/build" -mindepth 1 -maxdepth 1 -name 'embedwire-*' -exec rm -rf {} +
}

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/lock"

case "${1:-}" in
  restore)
    [[ ! -d $TREE/.fingerprint ]] || exit 0
    flock -s 9
    [[ -f $CACHE_ROOT/current/key ]] || exit 0
    mkdir -p "$TREE"
    # -a keeps the cached files' old times: the clone's sources stay newer than them.
    for part in "${PARTS[@]}"; do cp -a "$CACHE_ROOT/current/$part" "$TREE/"; done
    echo "build-cache: restored the dependencies compiled for key $(cat "$CACHE_ROOT/current/key") (this tree: $(key))" >&2
    ;;
  save)
    wanted=$(key) scope=bins
    [[ "${2:-}" == --tests ]] && scope=tests
    if [[ "$(cat "$CACHE_ROOT/current/key" 2>/dev/null)" == "$wanted" ]]; then
      [[ $scope == tests && "$(cat "$CACHE_ROOT/current/scope" 2>/dev/null)" != tests ]] || exit 0
    fi
    [[ -d $TREE/.fingerprint ]] || { echo "build-cache: no $TREE to save" >&2; exit 1; }
    flock -x 9
    staging=$(mktemp -d "$CACHE_ROOT/staging.XXXXXX")
    for part in "${PARTS[@]}"; do cp -a "$TREE/$part" "$staging/"; done
    drop_workspace_artifacts "$staging"
    echo "$wanted" >"$staging/key"
    echo "$scope" >"$staging/scope"
    rm -rf "$CACHE_ROOT/previous"
    [[ ! -d $CACHE_ROOT/current ]] || mv "$CACHE_ROOT/current" "$CACHE_ROOT/previous"
    mv "$staging" "$CACHE_ROOT/current"
    rm -rf "$CACHE_ROOT/previous"
    echo "build-cache: saved $(du -sh "$CACHE_ROOT/current" | cut -f1) of dependencies for key $wanted" >&2
    ;;
  *)
    echo "usage: $0 restore | save" >&2
    exit 2
    ;;
esac
