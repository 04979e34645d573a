#!/usr/bin/env bash
# A real kube-apiserver + etcd on loopback for probed's integration tests.
#
#   test/kube/env.sh build        build kube-apiserver, etcd, the kubelet and helm into the cache
#                                 (once per machine)
#   test/kube/env.sh start DIR [--node NAME]
#                                 credentials, etcd and kube-apiserver on free loopback ports;
#                                 writes DIR/kubeconfig and DIR/pids, prints `export` lines. With
#                                 --node, also the identity of a kubelet for node NAME (a token of
#                                 system:node:NAME in group system:nodes, DIR/node.kubeconfig) and
#                                 the Node authorizer and NodeRestriction (test/node/env.sh)
#   test/kube/env.sh stop DIR     stops what `start DIR` started (by the PIDs in DIR/pids)
#   test/kube/env.sh apiserver-stop DIR
#                                 stops only the kube-apiserver of DIR; etcd (and so the data) stays
#   test/kube/env.sh apiserver-start DIR
#                                 starts it again with the command line `start` recorded in
#                                 DIR/apiserver.env (same flags, port, credentials); waits for /readyz
#
# The binaries are built from the Go module proxy (k8s.io/kubernetes, whose go.mod pins
# go.etcd.io/etcd/server/v3) in a tools module of their own under
# ${PROBED_KUBE_CACHE:-$HOME/.cache/probed-kube}, never inside the project's module. A new machine
# pays ~8-9 minutes once; later builds are skipped when `kube-apiserver --version` and
# `kubelet --version` print the wanted version. There is no controller-manager or scheduler, and
# no kubelet runs here: tests write pod statuses themselves (test/node/env.sh runs a real kubelet
# with this server). See docs/cluster.md "Running the integration tests".
set -euo pipefail

KUBE_VERSION=v1.37.2
HELM_VERSION=v3.22.0
CACHE="${PROBED_KUBE_CACHE:-$HOME/.cache/probed-kube}"
BIN="$CACHE/bin"
export PATH="/usr/local/go/bin:$PATH"

die() { echo "env.sh: $*" >&2; exit 1; }

cmd_build() { build_kube; build_helm; }

# build_helm: helm from helm.sh/helm/v3 (no replace directives: `go install` works), for the chart
# tests of test/deploy (helm lint, helm template). The stamp file records the version built.
build_helm() {
  if [ -x "$BIN/helm" ] && [ "$(cat "$BIN/helm.version" 2>/dev/null)" = "$HELM_VERSION" ]; then
    echo "env.sh: cached helm $HELM_VERSION in $BIN"
    return 0
  fi
  mkdir -p "$BIN"
  echo "env.sh: building helm $HELM_VERSION"
  (cd "$CACHE" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$BIN" \
    go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
  echo "$HELM_VERSION" > "$BIN/helm.version"
}

# cached_version NAME: the version line the cached binary NAME prints, or nothing.
cached_version() { [ -x "$BIN/$1" ] && "$BIN/$1" --version 2>/dev/null | head -1; }

# server_cached: kube-apiserver (of KUBE_VERSION) and etcd are in the cache.
server_cached() { [ -x "$BIN/etcd" ] && [ "$(cached_version kube-apiserver)" = "Kubernetes $KUBE_VERSION" ]; }

# kubelet_cached: the kubelet of KUBE_VERSION is in the cache (for test/node/env.sh).
kubelet_cached() { [ "$(cached_version kubelet)" = "Kubernetes $KUBE_VERSION" ]; }

# build_kube: kube-apiserver, etcd and the kubelet from a tools module of their own. What is
# cached is kept: a cache from before the kubelet was added builds the kubelet alone (~3 min with
# the Go build cache of the apiserver build, ~10 s when only relinking).
build_kube() (  # a subshell: the cd and exports below stay inside
  if server_cached && kubelet_cached; then
    echo "env.sh: cached kube-apiserver and kubelet $KUBE_VERSION and etcd in $BIN"
    return 0
  fi
  command -v go >/dev/null || die "go not on PATH"
  local mod="$CACHE/tools"
  mkdir -p "$mod" "$BIN"
  # The tools module must not see the project's go.work or go.mod, nor its GOFLAGS beyond -buildvcs.
  export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
  cd "$mod"
  local kgomod
  kgomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$kgomod" ] || die "go mod download k8s.io/kubernetes@$KUBE_VERSION: no go.mod"
  local staging="v0.${KUBE_VERSION#v1.}"
  {
    echo "module local/probed-kube-tools"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "tool ("
    echo "	go.etcd.io/etcd/server/v3"
    echo "	k8s.io/kubernetes/cmd/kube-apiserver"
    echo "	k8s.io/kubernetes/cmd/kubelet"
    echo ")"
    echo
    echo "replace ("
    # One replace per staging module k8s.io/kubernetes requires at v0.0.0.
    grep -E '^[[:space:]]+k8s\.io/[A-Za-z0-9._/-]+ v0\.0\.0([[:space:]]|$)' "$kgomod" |
      awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}' | sort -u
    echo ")"
  } > go.mod
  echo "env.sh: go mod tidy ($(grep -c '=>' go.mod) replaces)"
  go mod tidy
  local pkg=k8s.io/component-base/version
  local major="${KUBE_VERSION#v}"; major="${major%%.*}"
  local minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  # One go build of the Kubernetes commands missing from the cache: they share their compiled
  # packages. The -X flags make --version print KUBE_VERSION (the cache check above).
  local cmds=()
  server_cached || cmds+=(k8s.io/kubernetes/cmd/kube-apiserver)
  kubelet_cached || cmds+=(k8s.io/kubernetes/cmd/kubelet)
  local out="$BIN/.new"
  rm -rf "$out"; mkdir -p "$out"
  echo "env.sh: building ${cmds[*]##*/} $KUBE_VERSION (kube-apiserver and kubelet: 8-9 min on an empty build cache; the kubelet alone after the apiserver: ~3 min)"
  go build -trimpath -o "$out/" -ldflags "-s -w \
    -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor \
    -X $pkg.gitTreeState=clean" "${cmds[@]}"
  if ! server_cached; then
    echo "env.sh: building etcd"
    go build -trimpath -o "$out/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
  fi
  local f
  for f in "$out"/*; do mv "$f" "$BIN/"; done
  rmdir "$out"
  "$BIN/kube-apiserver" --version
  "$BIN/kubelet" --version
  "$BIN/etcd" --version | head -1
)

# free_port prints a loopback TCP port nothing listens on (two when asked: P and P+1 free).
free_port() {
  local want="${1:-1}" p i
  for i in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    if ! port_in_use "$p" && { [ "$want" = 1 ] || ! port_in_use $((p + 1)); }; then
      echo "$p"; return 0
    fi
  done
  die "no free loopback port found"
}
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# https_status URL-PATH: the HTTP status line of GET PATH on the apiserver (openssl only: no curl
# needed on a fresh machine).
https_status() {
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$2" "$TOKEN" |
    timeout 5 openssl s_client -quiet -verify_return_error -CAfile "$DIR/pki/ca.crt" \
      -connect "127.0.0.1:$1" 2>/dev/null | head -1 | tr -d '\r'
}
http_status() {
  local port="$1" path="$2" line=""
  { exec 4<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&4
  IFS= read -r -t 5 line <&4 || true
  exec 4>&- 4<&-
  printf '%s' "${line%$'\r'}"
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# wait_until SECONDS PID NAME CHECK...: runs CHECK every 0.1 s until it succeeds; fails when the
# process PID exits or SECONDS pass, with the tail of its log.
wait_until() {
  local secs="$1" pid="$2" name="$3"; shift 3
  local deadline=$(( $(date +%s) + secs ))
  until "$@"; do
    if ! alive "$pid"; then
      echo "env.sh: $name exited; last lines of $DIR/logs/$name.log:" >&2
      tail -n 20 "$DIR/logs/$name.log" >&2
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "env.sh: $name not ready after ${secs}s; last lines of $DIR/logs/$name.log:" >&2
      tail -n 20 "$DIR/logs/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
}
etcd_healthy() { [[ "$(http_status "$ETCD_PORT" /health)" == *" 200 "* ]]; }
apiserver_ready() { [[ "$(https_status "$API_PORT" /readyz)" == *" 200 "* ]]; }

# make_credentials: a CA, a serving certificate for 127.0.0.1/localhost, the service-account
# signing key pair, and an admin bearer token (user admin in system:masters).
make_credentials() {
  command -v openssl >/dev/null || die "openssl not found (Debian: apt-get install -y openssl)"
  local pki="$DIR/pki"
  mkdir -p "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=probed-test-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=kube-apiserver" -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' > "$pki/apiserver.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key"
  openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  TOKEN="$(openssl rand -hex 32)"
  printf '%s,admin,admin,"system:masters"\n' "$TOKEN" > "$DIR/tokens.csv"
  if [ -n "$NODE" ]; then
    # The kubelet's identity: user system:node:NODE in group system:nodes, what the Node
    # authorizer and the NodeRestriction admission plugin recognise as the node NODE.
    NODE_TOKEN="$(openssl rand -hex 32)"
    printf '%s,system:node:%s,system:node:%s,"system:nodes"\n' "$NODE_TOKEN" "$NODE" "$NODE" >> "$DIR/tokens.csv"
  fi
  chmod 600 "$pki"/*.key "$DIR/tokens.csv"
}

start_etcd() {
  ETCD_PORT="$(free_port 2)"
  "$BIN/etcd" --name default --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync --log-level warn </dev/null >"$DIR/logs/etcd.log" 2>&1 &
  ETCD_PID=$!
  wait_until 60 "$ETCD_PID" etcd etcd_healthy
}

# start_apiserver: kube-apiserver on a free port, its command line recorded in DIR/apiserver.env
# (bash `declare -p` form) so that apiserver-start can run it again unchanged.
start_apiserver() {
  API_PORT="$(free_port)"
  local pki="$DIR/pki"
  # With a node (start --node): the Node authorizer before RBAC and NodeRestriction, as a
  # cluster with kubelets runs them.
  local AUTHZ=RBAC admission=()
  [ -z "$NODE" ] || { AUTHZ=Node,RBAC; admission=(--enable-admission-plugins NodeRestriction); }
  APISERVER_ARGS=(--etcd-servers "http://127.0.0.1:$ETCD_PORT"
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT"
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
    --client-ca-file "$pki/ca.crt" --token-auth-file "$DIR/tokens.csv"
    --authorization-mode "$AUTHZ"
    --service-account-issuer https://kubernetes.default.svc.cluster.local
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none
    --disable-admission-plugins ServiceAccount "${admission[@]}")
  declare -p API_PORT APISERVER_ARGS > "$DIR/apiserver.env"
  run_apiserver
}

# run_apiserver: runs kube-apiserver with APISERVER_ARGS (log appended: a restart keeps the first
# run's lines) and waits until it is ready.
run_apiserver() {
  "$BIN/kube-apiserver" "${APISERVER_ARGS[@]}" </dev/null >>"$DIR/logs/kube-apiserver.log" 2>&1 &
  API_PID=$!
  wait_until 180 "$API_PID" kube-apiserver apiserver_ready
}

# write_kubeconfig [FILE USER TOKEN]: DIR/kubeconfig for the admin (or FILE for USER with TOKEN).
write_kubeconfig() {
  local file="${1:-$DIR/kubeconfig}" user="${2:-admin}" token="${3:-$TOKEN}"
  cat > "$file" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: probed-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: probed-test
  context:
    cluster: probed-test
    user: $user
current-context: probed-test
KUBECONFIG
  chmod 600 "$file"
}

# cmd_start DIR [--node NAME]: with a node, also the kubelet's identity (DIR/node.kubeconfig).
cmd_start() {
  DIR="$1" NODE=""
  if [ $# = 3 ] && [ "$2" = --node ]; then
    NODE="$3"
  elif [ $# != 1 ]; then
    die "usage: $0 start DIR [--node NAME]"
  fi
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  if [ -f "$DIR/pids" ]; then
    local pid
    for pid in $(awk '{print $2}' "$DIR/pids"); do
      alive "$pid" && die "$DIR is in use (PID $pid runs); run: $0 stop $DIR"
    done
  fi
  # The server's binaries (built with the kubelet when missing) and helm; a cached server with no
  # kubelet does not wait for the kubelet's build (test/node/env.sh builds it).
  { server_cached || (build_kube); build_helm; } >&2
  rm -rf "$DIR/etcd" "$DIR/pki" "$DIR/logs" "$DIR/pids" "$DIR/kubeconfig" "$DIR/apiserver.env"
  mkdir -p "$DIR/logs"
  make_credentials
  # A port taken between the check and the bind (other processes on this machine) is retried.
  local attempt
  for attempt in 1 2 3; do
    ETCD_PID="" API_PID=""
    if start_etcd && { echo "etcd $ETCD_PID" > "$DIR/pids"; start_apiserver; }; then
      break
    fi
    alive "$API_PID" && kill "$API_PID"
    alive "$ETCD_PID" && kill "$ETCD_PID"
    wait 2>/dev/null || true
    rm -rf "$DIR/etcd" "$DIR/pids"
    [ "$attempt" = 3 ] && die "could not start etcd and kube-apiserver (logs in $DIR/logs)"
    echo "env.sh: retrying with other ports" >&2
  done
  printf 'etcd %s\nkube-apiserver %s\n' "$ETCD_PID" "$API_PID" > "$DIR/pids"
  write_kubeconfig
  [ -z "$NODE" ] || write_kubeconfig "$DIR/node.kubeconfig" "system:node:$NODE" "$NODE_TOKEN"
  echo "# kube-apiserver $KUBE_VERSION on https://127.0.0.1:$API_PORT, etcd on 127.0.0.1:$ETCD_PORT (logs: $DIR/logs)"
  echo "export PROBED_TEST_KUBECONFIG=$DIR/kubeconfig"
}

# stop_process NAME PID: SIGTERM, SIGKILL after 10 s; only a PID whose command line names $DIR
# (a PID the system gave to another process since is left alone).
stop_process() {
  local name="$1" pid="$2"
  alive "$pid" || return 0
  if ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$DIR"; then
    echo "env.sh: PID $pid is not our $name; left alone" >&2
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do alive "$pid" || return 0; sleep 0.1; done
  echo "env.sh: $name ($pid) still runs 10 s after SIGTERM; SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

# cmd_stop DIR: stops kube-apiserver, then etcd.
cmd_stop() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || { echo "env.sh: $1: no such directory" >&2; return 0; }
  [ -f "$DIR/pids" ] || { echo "env.sh: nothing started in $DIR" >&2; return 0; }
  local name pid
  while read -r name pid; do
    stop_process "$name" "$pid"
  done < <(tac "$DIR/pids")
  rm -f "$DIR/pids"
  echo "env.sh: stopped kube-apiserver and etcd of $DIR" >&2
}

# in_use_dir DIR: sets DIR (absolute) for a directory `start` set up, or fails.
in_use_dir() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || die "$1: no such directory"
  [ -f "$DIR/pids" ] && [ -f "$DIR/apiserver.env" ] || die "nothing started in $DIR (run: $0 start $DIR)"
}

# cmd_apiserver_stop DIR: stops only kube-apiserver (SIGTERM, as a node's apiserver is restarted);
# etcd keeps running, so every object survives. DIR/pids keeps etcd's line only.
cmd_apiserver_stop() {
  in_use_dir "$1"
  local pid
  pid="$(awk '$1 == "kube-apiserver" {print $2}' "$DIR/pids")"
  [ -n "$pid" ] || { echo "env.sh: kube-apiserver of $DIR is not running" >&2; return 0; }
  stop_process kube-apiserver "$pid"
  awk '$1 != "kube-apiserver"' "$DIR/pids" > "$DIR/pids.new" && mv "$DIR/pids.new" "$DIR/pids"
  echo "env.sh: stopped kube-apiserver of $DIR (etcd still runs)" >&2
}

# cmd_apiserver_start DIR: runs kube-apiserver again with the recorded command line (same port,
# so DIR/kubeconfig stays valid) and waits for /readyz.
cmd_apiserver_start() {
  in_use_dir "$1"
  local pid
  pid="$(awk '$1 == "kube-apiserver" {print $2}' "$DIR/pids")"
  alive "$pid" && die "kube-apiserver of $DIR already runs (PID $pid)"
  # shellcheck disable=SC1091
  source "$DIR/apiserver.env"
  TOKEN="$(head -1 "$DIR/tokens.csv" | cut -d, -f1)"
  port_in_use "$API_PORT" && die "port $API_PORT of $DIR is taken by another process"
  run_apiserver || die "kube-apiserver of $DIR did not become ready (log: $DIR/logs/kube-apiserver.log)"
  awk '$1 != "kube-apiserver"' "$DIR/pids" > "$DIR/pids.new" && mv "$DIR/pids.new" "$DIR/pids"
  echo "kube-apiserver $API_PID" >> "$DIR/pids"
  echo "env.sh: started kube-apiserver of $DIR again on https://127.0.0.1:$API_PORT" >&2
}

usage="usage: $0 build | start DIR [--node NAME] | stop DIR | apiserver-stop DIR | apiserver-start DIR"
case "${1:-}" in
  build) cmd_build ;;
  start) [ $# = 2 ] || [ $# = 4 ] || die "usage: $0 start DIR [--node NAME]"; shift; cmd_start "$@" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  apiserver-stop) [ $# = 2 ] || die "usage: $0 apiserver-stop DIR"; cmd_apiserver_stop "$2" ;;
  apiserver-start) [ $# = 2 ] || die "usage: $0 apiserver-start DIR"; cmd_apiserver_start "$2" ;;
  *) die "$usage" ;;
esac
