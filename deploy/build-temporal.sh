#!/usr/bin/env bash
# Build the real Temporal server, its SQL schema tool and the Web UI server from the Go
# module proxy, at the versions in deploy/temporal/versions.env. The server is Tower's build
# (deploy/temporal/server: the unmodified server plus a guard on signal bytes). The binaries
# are cached in .tower/temporal/<versions>/bin: a second run builds nothing. Prints that
# directory.
#
#   deploy/build-temporal.sh            # -> .tower/temporal/1.32.1-ui2.54.1-<guard>/bin
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=temporal/versions.env
source deploy/temporal/versions.env
# A change to Tower's server sources is a new build.
guard=$(cat deploy/temporal/server/go.mod deploy/temporal/server/go.sum \
        deploy/temporal/server/*.go | sha256sum | cut -c1-12)
out=".tower/temporal/${TEMPORAL_VERSION}-ui${TEMPORAL_UI_VERSION}-${guard}"
bin="$out/bin"
# Builds started at once (pytest's workers, each starting a cluster) wait for the first one
# and then find its binaries, instead of racing it to install them.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [[ -x $bin/temporal-server && -x $bin/temporal-sql-tool && -x $bin/temporal-ui-server
      && -f $out/ui-config/docker.yaml ]]; then
    echo "$PWD/$bin"
    exit 0
fi
# Go's own install location, for a shell whose PATH lacks it.
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "error: Go is not installed (needed to build Temporal)" >&2; exit 3; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$bin" "$out/ui-config"
grep -q "go.temporal.io/server v$TEMPORAL_VERSION\$" deploy/temporal/server/go.mod || {
    echo "error: deploy/temporal/server/go.mod does not require server v$TEMPORAL_VERSION" >&2
    exit 3
}
# Its own tests first (the authorizer's policy table, the token mapper, the signal guard).
(cd deploy/temporal/server && go test -buildvcs=false ./... \
    && go build -buildvcs=false -o "$work/server/server" .) >&2
# Both modules name their command `server`: build each into its own directory.
GOBIN="$work/server" go install "go.temporal.io/server/cmd/tools/sql@v$TEMPORAL_VERSION" >&2
GOBIN="$work/ui" go install \
    "github.com/temporalio/ui-server/v2/cmd/server@v$TEMPORAL_UI_VERSION" >&2
# The UI server reads its settings from the environment through this template: the same
# one the temporalio/ui image runs (TEMPORAL_ADDRESS, TEMPORAL_UI_PORT, TEMPORAL_CODEC_ENDPOINT).
ui_dir=$(go mod download -json "github.com/temporalio/ui-server/v2@v$TEMPORAL_UI_VERSION" |
         sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
install -m 644 "$ui_dir/config/docker.yaml" "$out/ui-config/docker.yaml"
install -m 755 "$work/server/sql" "$bin/temporal-sql-tool"
install -m 755 "$work/ui/server" "$bin/temporal-ui-server"
# Last: its presence means the whole build finished.
install -m 755 "$work/server/server" "$bin/temporal-server"
echo "$PWD/$bin"
