#!/usr/bin/env bash
# One real single-node Kubernetes cluster on this machine, for the tests and the density benchmark
# that need the kubelet itself (test/e2e's TestNode… and TestChart… cases, bench/node): its own
# control plane (test/kube/env.sh start --node: kube-apiserver + etcd, kube-controller-manager and
# kube-scheduler, ServiceAccount admission and bound tokens), its own containerd + runc
# (test/cri/env.sh start) with the images built here (busybox, the pause image, the probe target),
# and the kubelet, all v1.37.2 built from the Go module proxy. Nothing is pulled. Controllers work
# as in any cluster: a DaemonSet is rolled out by its controller, a Deployment's pods are scheduled,
# owners' dependents are garbage-collected, every pod gets a token bound to it. Pods may still be
# created with spec.nodeName set (the tests of the kubelet do: no scheduler in their way). There is
# no CNI plugin but loopback, so pods that must be reached run with hostNetwork: true, and no
# kube-proxy: in-cluster clients name the API server themselves (the chart's apiServer value) and
# the API server calls webhooks at their Service's endpoints (docs/cluster.md "Running the node
# tests").
#
#   test/node/env.sh build        the kubelet (with kube-apiserver and etcd, test/kube/env.sh
#                                 build; cached) and the probe target
#   test/node/env.sh start DIR    everything above in DIR; waits until the node is Ready with a
#                                 fresh heartbeat; prints `export PROBED_TEST_NODE=DIR`
#   test/node/env.sh stop DIR     stops the kubelet, every container, containerd, the API server
#                                 and etcd, and undoes what the kubelet changed on the host
#
# The kubelet changes the host whatever its flags say (the project's notes on the container
# runtime): sysctls (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys, kernel.keys.root_maxbytes), /var/lib/kubelet (device plugins, pod
# resources), /var/log/containers and /var/log/pods, cgroups in every controller, a bind mount of
# its root directory. `start` records each before the kubelet runs (DIR/host-state) and `stop`
# puts each back. So one node runs on a machine at a time (/run/probed-node names it).
#
# What the kubelet needs here (docs/cluster.md "Running the node tests"): failCgroupV1: false and the
# cgroupfs driver (cgroups are hybrid v1), containerd's restrict_oom_score_adj (test/cri/env.sh), a
# loopback CNI conflist and Debian's loopback plugin (otherwise the node stays NotReady, "cni
# plugin not initialized"), no
# --node-ip (a loopback node IP is refused: the node's address is the machine's own, and so is every
# pod's), volumePluginDir and podLogsDir under DIR, image garbage collection off (the images cannot
# be pulled again), the kubelet's API on every address (the API server reaches it on the node's
# InternalIP for logs and exec). Requires root, containernetworking-plugins and what
# test/cri/env.sh requires.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${PROBED_KUBE_CACHE:-$HOME/.cache/probed-kube}"
BIN="$CACHE/bin"
export PATH="/usr/local/go/bin:$PATH"

NODE=probed-node
TARGET_IMAGE=probed.test/target:1
LOCK=/run/probed-node
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Host paths the kubelet creates whatever its --root-dir says: removed at stop when start did not
# find them.
HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods)
CGROUP_ROOT=probed-node
LOOPBACK=/usr/lib/cni/loopback # the CNI loopback plugin (Debian's containernetworking-plugins)

die() { echo "node/env.sh: $*" >&2; exit 1; }
say() { echo "node/env.sh: $*" >&2; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

cmd_build() {
  "$ROOT/test/kube/env.sh" build >&2
  build_target
}

# build_target: the probe target (internal/probetarget), static, into the cache.
build_target() {
  mkdir -p "$BIN"
  (cd "$ROOT" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" \
    -o "$BIN/probe-target" ./test/node/target) >&2
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# cgroup_dirs: the node's cgroup root in every hierarchy (v1 controllers and the unified one).
cgroup_dirs() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [ -d "$d" ] && [ -f "$d/cgroup.procs" ] && echo "${d%/}/$CGROUP_ROOT"
  done
  return 0
}

# record_host: what the kubelet will change, as it is now (DIR/host-state, read back by stop).
record_host() {
  local s p
  : > "$DIR/host-state"
  for s in "${SYSCTLS[@]}"; do
    echo "sysctl $s $(sysctl -n "$s")" >> "$DIR/host-state"
  done
  for p in "${HOST_PATHS[@]}"; do
    [ -e "$p" ] || echo "created $p" >> "$DIR/host-state"
  done
}

# restore_host: the sysctls back to their recorded values, the host paths start did not find
# removed (after unmounting what is mounted under them).
restore_host() {
  [ -f "$DIR/host-state" ] || return 0
  local kind a b
  while read -r kind a b; do
    case "$kind" in
      sysctl) [ "$(sysctl -n "$a")" = "$b" ] || sysctl -q -w "$a=$b" || say "could not restore $a=$b" ;;
      created) unmount_under "$a"; rm -rf "$a" ;;
    esac
  done < "$DIR/host-state"
  rm -f "$DIR/host-state"
}

# unmount_under PATH: unmounts every mount at or under PATH, deepest first.
unmount_under() {
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "could not unmount $m"
  done
}

write_kubelet_config() {
  local port healthz
  port="$(free_port)"
  healthz="$(free_port)"
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs" "$DIR/kubelet/volume-plugins"
  cat > "$DIR/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroups are hybrid (v1 controllers) on this machine kind: the kubelet refuses v1 by default.
failCgroupV1: false
cgroupDriver: cgroupfs
# Every pod's cgroup under /$CGROUP_ROOT/kubepods: stop removes the whole tree.
cgroupRoot: /$CGROUP_ROOT
failSwapOn: false
containerRuntimeEndpoint: unix://$DIR/cri/containerd.sock
imageServiceEndpoint: unix://$DIR/cri/containerd.sock
# The kubelet's API on every address: the API server calls it on the node's InternalIP (kubectl
# logs, exec) with its client certificate; the admin token of DIR/kube/kubeconfig reads its
# /metrics on 127.0.0.1. Nobody anonymous: authentication by the node's CA or a token
# (TokenReview), authorization by SubjectAccessReview against the node's API server.
address: 0.0.0.0
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $DIR/kube/pki/ca.crt
authorization:
  mode: Webhook
volumePluginDir: $DIR/kubelet/volume-plugins
podLogsDir: $DIR/pod-logs
# The images were imported, not pulled: they cannot come back once collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A shared test machine: no eviction of the test's pods over the disk others fill.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
maxPods: 1000
resolvConf: /etc/resolv.conf
YAML
  echo "$port" > "$DIR/kubelet-port"
}

start_kubelet() {
  "$BIN/kubelet" --config "$DIR/kubelet-config.yaml" --kubeconfig "$DIR/kube/node.kubeconfig" \
    --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki" --hostname-override "$NODE" \
    --v "${PROBED_NODE_KUBELET_V:-0}" </dev/null >>"$DIR/logs/kubelet.log" 2>&1 &
  KUBELET_PID=$!
  echo "kubelet $KUBELET_PID" >> "$DIR/pids"
}

# api_get PATH: GET PATH on the node's API server as the admin (openssl only: no curl or kubectl
# on a fresh machine); prints the body.
api_get() {
  local server token
  server="$(sed -n 's#^ *server: https://##p' "$DIR/kube/kubeconfig")"
  token="$(sed -n 's/^ *token: //p' "$DIR/kube/kubeconfig")"
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$1" "$server" "$token" |
    timeout 5 openssl s_client -quiet -verify_return_error -CAfile "$DIR/kube/pki/ca.crt" -connect "$server" 2>/dev/null |
    sed '1,/^\r$/d'
}

# node_ready: the Node's Ready condition is True with a heartbeat after the kubelet started.
node_ready() {
  local node hb
  node="$(api_get "/api/v1/nodes/$NODE" | tr -d '\n ')"
  [[ "$node" == *'"type":"Ready","status":"True"'* ]] || return 1
  hb="$(sed -n 's/.*"type":"Ready","status":"True","lastHeartbeatTime":"\([^"]*\)".*/\1/p' <<< "$node")"
  [ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -ge "$KUBELET_STARTED" ]
}

# node_schedulable: the node carries no NoSchedule taint (the node lifecycle controller removes
# node.kubernetes.io/not-ready a moment after Ready): the scheduler places pods on it.
node_schedulable() {
  ! api_get "/api/v1/nodes/$NODE" | tr -d '\n ' | grep -q '"effect":"NoSchedule"'
}

wait_node_ready() {
  local deadline=$(( $(date +%s) + $1 ))
  until node_ready && node_schedulable; do
    if ! alive "$KUBELET_PID"; then
      tail -n 30 "$DIR/logs/kubelet.log" >&2
      die "the kubelet exited (log: $DIR/logs/kubelet.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      grep -E '^E|NotReady|not ready' "$DIR/logs/kubelet.log" | tail -n 20 >&2 || true
      die "node $NODE not Ready after ${1}s (log: $DIR/logs/kubelet.log)"
    fi
    sleep 0.5
  done
}

# start_failed CODE: the EXIT trap of a start that did not finish: what started is stopped.
start_failed() {
  [ "$1" = 0 ] && return 0
  say "start failed; stopping what started"
  (cmd_stop "$DIR") || true
  exit "$1"
}

cmd_start() {
  [ "$(id -u)" = 0 ] || die "the kubelet needs root"
  [ -x "$LOOPBACK" ] || die "$LOOPBACK not found (Debian: apt-get install -y containernetworking-plugins)"
  DIR="$1"
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  [ "${#DIR}" -le 72 ] || die "$DIR: path too long (containerd's socket is DIR/cri/containerd.sock.ttrpc; keep DIR under 72 characters)"
  if [ -f "$LOCK" ]; then
    local other
    other="$(cat "$LOCK")"
    if [ -f "$other/pids" ] && alive "$(awk '$1 == "kubelet" {print $2}' "$other/pids")"; then
      die "a node runs on this machine already ($other; one at a time: run $0 stop $other)"
    fi
    say "$LOCK names $other, whose kubelet is gone: cleaning it up"
    (cmd_stop "$other") || true
  fi
  [ -e "$DIR/pids" ] && die "$DIR is in use; run: $0 stop $DIR"
  cmd_build
  echo "$DIR" > "$LOCK"
  mkdir -p "$DIR/logs" "$DIR/state"
  : > "$DIR/pids"
  trap 'start_failed $?' EXIT
  local t0
  t0=$(date +%s)
  "$ROOT/test/kube/env.sh" start "$DIR/kube" --node "$NODE" > "$DIR/kube.env"
  "$ROOT/test/cri/env.sh" start "$DIR/cri" > "$DIR/cri.env"
  "$ROOT/test/cri/env.sh" image "$DIR/cri" "$TARGET_IMAGE" '["/bin/probe-target"]' "$BIN/probe-target" >&2
  # The node is Ready only once the runtime reports its network ready: a loopback conflist is
  # enough for hostNetwork pods (no plugin binary runs for them). A pod without hostNetwork (the
  # agent's pod of the tests' pod-bound token) gets a network namespace with loopback alone; the
  # plugin must be there, or its sandbox can be neither set up nor torn down, and the pod is never
  # removed.
  ln -s "$LOOPBACK" "$DIR/cri/cni/bin/loopback"
  printf '{"cniVersion":"1.0.0","name":"probed-node","plugins":[{"type":"loopback"}]}\n' > "$DIR/cri/cni/net.d/10-loopback.conflist"
  record_host
  local d
  for d in $(cgroup_dirs); do mkdir -p "$d"; done
  write_kubelet_config
  KUBELET_STARTED=$(date +%s)
  start_kubelet
  wait_node_ready 300
  trap - EXIT
  local ip
  ip="$(api_get "/api/v1/nodes/$NODE" | tr -d '\n ' | sed -n 's/.*"addresses":\[{"type":"InternalIP","address":"\([^"]*\)".*/\1/p')"
  local server
  server="$(sed -n 's#^ *server: https://##p' "$DIR/kube/kubeconfig")"
  cat > "$DIR/node.env" <<ENV
NODE=$NODE
NODE_IP=$ip
KUBECONFIG=$DIR/kube/kubeconfig
CRI_ENDPOINT=unix://$DIR/cri/containerd.sock
IMAGE=$TARGET_IMAGE
STATE=$DIR/state
KUBELET_PID=$KUBELET_PID
KUBELET_PORT=$(cat "$DIR/kubelet-port")
CONTAINERD_PID=$(awk '$1 == "containerd" {print $2}' "$DIR/cri/pids")
CRI_SOCKET=$DIR/cri/containerd.sock
API_HOST=${server%:*}
API_PORT=${server##*:}
KUBECTL=$BIN/kubectl
HELM=$BIN/helm
ENV
  echo "# node $NODE ($ip) Ready in $(( $(date +%s) - t0 )) s: kubelet $("$BIN/kubelet" --version | awk '{print $2}') (PID $KUBELET_PID), containerd on unix://$DIR/cri/containerd.sock, image $TARGET_IMAGE (logs: $DIR/logs, $DIR/kube/logs, $DIR/cri/logs)"
  echo "export PROBED_TEST_NODE=$DIR"
}

# stop_pid NAME PID: SIGTERM, SIGKILL after 20 s; only a PID whose command line names DIR.
stop_pid() {
  local name="$1" pid="$2" i
  alive "$pid" || return 0
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$DIR" || { say "PID $pid is not our $name; left alone"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 200); do alive "$pid" || return 0; sleep 0.1; done
  say "$name ($pid) still runs 20 s after SIGTERM; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_stop() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || { say "$1: no such directory"; return 0; }
  [ -f "$DIR/pids" ] || [ -d "$DIR/kube" ] || [ -d "$DIR/cri" ] || die "$DIR was not set up by $0 start; not touched"
  # The kubelet first: it would restart the containers stopped below.
  stop_pid kubelet "$(awk '$1 == "kubelet" {print $2}' "$DIR/pids" 2>/dev/null || true)"
  [ ! -d "$DIR/cri" ] || "$ROOT/test/cri/env.sh" stop "$DIR/cri" || say "test/cri/env.sh stop failed"
  # Whatever is left in the pods' cgroups is killed, then the groups are removed.
  local d pid
  for d in $(cgroup_dirs); do
    [ -d "$d" ] || continue
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done
  done
  sleep 0.2
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && { find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || say "could not remove cgroup $d"; }
  done
  unmount_under "$DIR"
  restore_host
  [ ! -d "$DIR/kube" ] || "$ROOT/test/kube/env.sh" stop "$DIR/kube" || say "test/kube/env.sh stop failed"
  [ "$(cat "$LOCK" 2>/dev/null)" != "$DIR" ] || rm -f "$LOCK"
  rm -rf "$DIR"
  say "stopped node $NODE of $DIR and put the host back"
}

case "${1:-}" in
  build) cmd_build ;;
  start) [ $# = 2 ] || die "usage: $0 start DIR"; cmd_start "$2" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  *) die "usage: $0 build | start DIR | stop DIR" ;;
esac
