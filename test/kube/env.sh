#!/usr/bin/env bash
# A real kube-apiserver + etcd on loopback for probed's integration tests, and the control plane of
# the real node (test/node/env.sh).
#
#   test/kube/env.sh build        build kube-apiserver, etcd, the kubelet, kube-controller-manager,
#                                 kube-scheduler, kubectl and helm into the cache (once per machine)
#   test/kube/env.sh start DIR [--node NAME]
#                                 credentials, etcd and kube-apiserver on free loopback ports;
#                                 writes DIR/kubeconfig and DIR/pids, prints `export` lines. With
#                                 --node, the control plane of a real single-node cluster: the
#                                 identity of a kubelet for node NAME (a token of system:node:NAME in
#                                 group system:nodes, DIR/node.kubeconfig), the Node authorizer,
#                                 NodeRestriction and ServiceAccount admission, a client certificate
#                                 for the API server's requests to the kubelet (logs, exec), and
#                                 kube-controller-manager and kube-scheduler, each with its own
#                                 identity (test/node/env.sh)
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
# pays it once; later builds are skipped when each cached binary's `--version` prints the wanted
# version, and only the missing ones are built. Without --node there is no controller-manager or
# scheduler and no ServiceAccount admission: tests write pod statuses themselves (test/node/env.sh
# runs a real kubelet with the --node control plane). See docs/cluster.md "Running the integration
# tests".
set -euo pipefail

KUBE_VERSION=v1.37.2
HELM_VERSION=v3.22.0
CACHE="${PROBED_KUBE_CACHE:-$HOME/.cache/probed-kube}"
BIN="$CACHE/bin"
export PATH="/usr/local/go/bin:$PATH"

die() { echo "env.sh: $*" >&2; exit 1; }

cmd_build() { build_kube all; build_helm; }

# build_helm: helm from helm.sh/helm/v3 (no replace directives: `go install` works), for the chart
# tests of test/deploy (helm lint, helm template) and the chart's install on the real node. The
# stamp file records the version built.
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

# The Kubernetes commands of the tools module, by the name of their binary; SERVER the ones a plain
# `start` needs, CONTROL_PLANE the ones `start --node` needs besides.
KUBE_CMDS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl)
SERVER=(kube-apiserver)
CONTROL_PLANE=(kube-apiserver kube-controller-manager kube-scheduler)

# cached NAME: the cached binary NAME (a Kubernetes command, or etcd) is there, of KUBE_VERSION.
cached() {
  local v
  [ -x "$BIN/$1" ] || return 1
  case "$1" in
    etcd) return 0 ;;
    kubectl) v="$("$BIN/kubectl" version --client 2>/dev/null | head -1)"; [ "$v" = "Client Version: $KUBE_VERSION" ] ;;
    *) v="$("$BIN/$1" --version 2>/dev/null | head -1)"; [ "$v" = "Kubernetes $KUBE_VERSION" ] ;;
  esac
}

# all_cached NAME...: every named binary is cached (etcd with kube-apiserver).
all_cached() {
  local n
  for n in "$@"; do
    cached "$n" || return 1
    [ "$n" != kube-apiserver ] || cached etcd || return 1
  done
}

# build_kube all|NAME...: the named Kubernetes commands (all: KUBE_CMDS) that are not cached, and
# etcd with kube-apiserver, from a tools module of their own, in one `go build` that compiles their
# shared packages once. What is cached is kept: a cache from before a command was added builds
# that command alone (with the Go build cache of the earlier builds: minutes, not the first
# build's tens of minutes).
build_kube() (  # a subshell: the cd and exports below stay inside
  local want=("$@")
  [ "${want[0]:-all}" != all ] || want=("${KUBE_CMDS[@]}")
  local cmds=() n
  for n in "${want[@]}"; do cached "$n" || cmds+=("k8s.io/kubernetes/cmd/$n"); done
  local need_etcd=""
  for n in "${want[@]}"; do [ "$n" != kube-apiserver ] || cached etcd || need_etcd=1; done
  if [ ${#cmds[@]} = 0 ] && [ -z "$need_etcd" ]; then
    echo "env.sh: cached ${want[*]} $KUBE_VERSION in $BIN"
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
    for n in "${KUBE_CMDS[@]}"; do echo "	k8s.io/kubernetes/cmd/$n"; done
    echo ")"
    echo
    echo "replace ("
    # One replace per staging module k8s.io/kubernetes requires at v0.0.0.
    grep -E '^[[:space:]]+k8s\.io/[A-Za-z0-9._/-]+ v0\.0\.0([[:space:]]|$)' "$kgomod" |
      awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}' | sort -u
    echo ")"
  } > go.mod.in.new
  # go mod tidy only when the module changed (a new command, another version): go.mod.in keeps
  # what was written before tidy.
  if ! cmp -s go.mod.in.new go.mod.in || [ ! -f go.sum ]; then
    cp go.mod.in.new go.mod
    echo "env.sh: go mod tidy ($(grep -c '=>' go.mod) replaces)"
    go mod tidy
    mv go.mod.in.new go.mod.in
  else
    rm go.mod.in.new
  fi
  local pkg=k8s.io/component-base/version
  local major="${KUBE_VERSION#v}"; major="${major%%.*}"
  local minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  local out="$BIN/.new"
  rm -rf "$out"; mkdir -p "$out"
  if [ ${#cmds[@]} -gt 0 ]; then
    # The -X flags make --version print KUBE_VERSION (the cache check above).
    echo "env.sh: building ${cmds[*]##*/} $KUBE_VERSION (all of them on an empty build cache: 20-25 min on a loaded 2-core machine; docs/cluster.md)"
    local t0=$SECONDS
    go build -trimpath -o "$out/" -ldflags "-s -w \
      -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor \
      -X $pkg.gitTreeState=clean" "${cmds[@]}"
    echo "env.sh: built ${cmds[*]##*/} in $(( SECONDS - t0 )) s"
  fi
  if [ -n "$need_etcd" ]; then
    echo "env.sh: building etcd"
    go build -trimpath -o "$out/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
  fi
  local f
  for f in "$out"/*; do mv "$f" "$BIN/"; done
  rmdir "$out"
  for n in "${want[@]}"; do
    case "$n" in
      kubectl) "$BIN/kubectl" version --client | head -1 ;;
      *) "$BIN/$n" --version ;;
    esac
  done
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
    # kube-controller-manager and kube-scheduler as the users the API server's bootstrap RBAC
    # binds their roles to (each controller then acts as a ServiceAccount of kube-system of its
    # own: --use-service-account-credentials).
    CM_TOKEN="$(openssl rand -hex 32)" SCHED_TOKEN="$(openssl rand -hex 32)"
    printf '%s,system:kube-controller-manager,system:kube-controller-manager\n' "$CM_TOKEN" >> "$DIR/tokens.csv"
    printf '%s,system:kube-scheduler,system:kube-scheduler\n' "$SCHED_TOKEN" >> "$DIR/tokens.csv"
    # The API server's client certificate towards the kubelet (kubectl logs, exec, port-forward:
    # the API server calls the kubelet's API, which authenticates it with the same CA and asks the
    # API server whether it may; system:masters may).
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' > "$pki/kubelet-client.ext"
    openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
      -CAcreateserial -days 30 -extfile "$pki/kubelet-client.ext" -out "$pki/kubelet-client.crt" 2>/dev/null
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
  # Without a node: no ServiceAccount admission (no controller-manager makes the namespaces'
  # default ServiceAccounts; tests bind pods by spec.nodeName and write their statuses). With a
  # node (start --node), as a cluster with kubelets runs: the Node authorizer before RBAC,
  # NodeRestriction, ServiceAccount admission (every pod gets its bound token projected by the
  # kubelet), the kubelet reached on its InternalIP (the node's name resolves nowhere) with a
  # client certificate, and webhooks and aggregated APIs reached at their Service's endpoints
  # rather than its ClusterIP: there is no kube-proxy (docs/cluster.md "Running the node tests").
  local AUTHZ=RBAC admission=(--disable-admission-plugins ServiceAccount)
  if [ -n "$NODE" ]; then
    AUTHZ=Node,RBAC
    admission=(--enable-admission-plugins NodeRestriction
      --kubelet-client-certificate "$pki/kubelet-client.crt" --kubelet-client-key "$pki/kubelet-client.key"
      --kubelet-preferred-address-types InternalIP,Hostname
      --enable-aggregator-routing=true)
  fi
  APISERVER_ARGS=(--etcd-servers "http://127.0.0.1:$ETCD_PORT"
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT"
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
    --client-ca-file "$pki/ca.crt" --token-auth-file "$DIR/tokens.csv"
    --authorization-mode "$AUTHZ"
    --service-account-issuer https://kubernetes.default.svc.cluster.local
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none
    "${admission[@]}")
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

# https_up PORT PATH: GET PATH on 127.0.0.1:PORT over TLS answers 200 (a component's own serving
# certificate, self-signed: not verified; /healthz needs no credentials).
https_up() {
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" |
    timeout 5 openssl s_client -quiet -connect "127.0.0.1:$1" 2>/dev/null | head -1 | grep -q ' 200 '
}

# default_service_account: the controller-manager's ServiceAccount controller has made the default
# ServiceAccount of namespace default (its controllers run, not only its /healthz).
default_service_account() { [[ "$(https_status "$API_PORT" /api/v1/namespaces/default/serviceaccounts/default)" == *" 200 "* ]]; }

# start_controllers: kube-controller-manager and kube-scheduler of KUBE_VERSION for the node's
# cluster, each with its identity's kubeconfig (also its delegated authentication and
# authorization of its own /healthz), no leader election (one of each), their HTTPS on loopback
# ports. The controller-manager signs the tokens of ServiceAccount Secrets with the API server's
# service-account key and publishes the CA as each namespace's kube-root-ca.crt (what a pod's
# projected token volume holds). A node's heartbeat may come late on a loaded machine: the node
# is marked unreachable (and its pods' eviction timers start) after 3 minutes without one, not
# the default 50 s.
start_controllers() {
  local pki="$DIR/pki" cm_port sched_port
  write_kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager "$CM_TOKEN"
  write_kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler "$SCHED_TOKEN"
  cm_port="$(free_port)"
  "$BIN/kube-controller-manager" --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$cm_port" --leader-elect=false \
    --use-service-account-credentials \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --node-monitor-grace-period 3m \
    </dev/null >>"$DIR/logs/kube-controller-manager.log" 2>&1 &
  CM_PID=$!
  echo "kube-controller-manager $CM_PID" >> "$DIR/pids"
  sched_port="$(free_port)"
  "$BIN/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false \
    </dev/null >>"$DIR/logs/kube-scheduler.log" 2>&1 &
  SCHED_PID=$!
  echo "kube-scheduler $SCHED_PID" >> "$DIR/pids"
  wait_until 120 "$CM_PID" kube-controller-manager https_up "$cm_port" /healthz || return 1
  wait_until 120 "$CM_PID" kube-controller-manager default_service_account || return 1
  wait_until 120 "$SCHED_PID" kube-scheduler https_up "$sched_port" /healthz || return 1
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
  # The binaries this start runs (a cache without them builds them; never the others: a plain
  # server does not wait for the kubelet's build) and helm.
  if [ -n "$NODE" ]; then
    { build_kube "${CONTROL_PLANE[@]}"; build_helm; } >&2
  else
    { build_kube "${SERVER[@]}"; build_helm; } >&2
  fi
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
  if [ -n "$NODE" ]; then
    write_kubeconfig "$DIR/node.kubeconfig" "system:node:$NODE" "$NODE_TOKEN"
    start_controllers || { cmd_stop "$DIR"; die "kube-controller-manager or kube-scheduler did not start (logs in $DIR/logs)"; }
    echo "# kube-controller-manager (PID $CM_PID) and kube-scheduler (PID $SCHED_PID) $KUBE_VERSION"
  fi
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

# cmd_stop DIR: stops what start recorded in DIR/pids, last first: the scheduler and the
# controller-manager (with a node), kube-apiserver, then etcd.
cmd_stop() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || { echo "env.sh: $1: no such directory" >&2; return 0; }
  [ -f "$DIR/pids" ] || { echo "env.sh: nothing started in $DIR" >&2; return 0; }
  local name pid
  while read -r name pid; do
    stop_process "$name" "$pid"
  done < <(tac "$DIR/pids")
  rm -f "$DIR/pids"
  echo "env.sh: stopped the control plane of $DIR" >&2
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
