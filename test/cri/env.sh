#!/usr/bin/env bash
# A real containerd (Debian's 1.6, CRI v1) with runc for the tests of probed's container-runtime
# seam (agent/kube/cri, agent/kube/restart, test/e2e). Nothing is ever pulled.
#
#   test/cri/env.sh start DIR     containerd on a private socket with root, state, runc and
#                                 registry config under DIR; imports the test images; writes
#                                 DIR/pids and prints `export` lines
#   test/cri/env.sh stop DIR      kills every container and shim of DIR's containerd, stops it,
#                                 unmounts what it left mounted under DIR and removes DIR
#   test/cri/env.sh daemon-stop DIR
#                                 stops only containerd (SIGTERM, as a node's runtime is
#                                 restarted): the shims and containers keep running
#   test/cri/env.sh daemon-start DIR
#                                 starts containerd of DIR again with the same configuration and
#                                 waits until it answers
#   test/cri/env.sh image DIR NAME CMD-JSON [FILE...]
#                                 builds the image NAME (busybox, and each FILE in /bin: static
#                                 binaries) and imports it into DIR's containerd
#
# What it takes on this machine kind (../../docs/cluster.md "Running the CRI tests"; the facts in
# the project's notes on the container runtime):
#   - restrict_oom_score_adj = true: runc cannot lower oom_score_adj here (no CAP_SYS_RESOURCE);
#   - the registry configuration (config_path) sends docker.io, registry.k8s.io and every other
#     registry to http://127.0.0.1:1, a closed port: an accidental pull fails at once;
#   - two images built here from Debian's busybox-static (an OCI layout tarball: one layer, a
#     config, a manifest and an index whose io.containerd.image.name annotation names it) and
#     imported into the k8s.io namespace: the test image probed.test/busybox:1 and the sandbox
#     image probed.test/pause:1, which sandbox_image names exactly (CRI RunPodSandbox tries to pull
#     a missing sandbox image);
#   - runc's state under DIR/runc (not /run/containerd/runc) and the containers' cgroups under
#     the parent the tests give their sandboxes (internal/critest: /probed-cri-test).
# Requires root, containerd, runc and busybox-static (Debian packages; .ci/run installs them).
set -euo pipefail

die() { echo "env.sh: $*" >&2; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

TEST_IMAGE=probed.test/busybox:1
SANDBOX_IMAGE=probed.test/pause:1

need_tools() {
  [ "$(id -u)" = 0 ] || die "containerd and runc need root"
  local t
  for t in containerd containerd-shim-runc-v2 ctr runc; do
    command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install -y containerd runc busybox-static)"
  done
  # The image holds /bin/busybox alone: it must be the static build (no loader in the image).
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" ||
    die "busybox-static is not installed (Debian: apt-get install -y busybox-static)"
}

write_config() {
  mkdir -p "$DIR/root" "$DIR/state" "$DIR/runc" "$DIR/opt" "$DIR/cni/bin" "$DIR/cni/net.d" "$DIR/logs"
  local host
  for host in docker.io registry.k8s.io _default; do
    mkdir -p "$DIR/certs.d/$host"
    printf 'server = "http://127.0.0.1:1"\n\n[host."http://127.0.0.1:1"]\n  capabilities = ["pull", "resolve"]\n' \
      > "$DIR/certs.d/$host/hosts.toml"
  done
  cat > "$DIR/config.toml" <<TOML
version = 2
root = "$DIR/root"
state = "$DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$DIR/containerd.sock"

[ttrpc]
  address = "$DIR/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$DIR/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$DIR/cni/bin"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$DIR/runc"
TOML
}

# build_image NAME CMD-JSON OUT [FILE...]: an OCI layout tarball of a busybox-static rootfs
# (busybox and a link per applet in /bin, and each FILE in /bin) whose default command is CMD-JSON.
build_image() {
  local name="$1" cmd="$2" out="$3"
  shift 3
  local work="$DIR/image-build"
  rm -rf "$work"
  mkdir -p "$work/rootfs/bin" "$work/rootfs/proc" "$work/rootfs/sys" "$work/rootfs/dev" \
    "$work/rootfs/tmp" "$work/rootfs/etc" "$work/layout/blobs/sha256"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$work/rootfs/bin/$applet"
  done
  local f
  for f in "$@"; do cp "$f" "$work/rootfs/bin/"; done
  chmod 1777 "$work/rootfs/tmp"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$work/layer.tar" -C "$work/rootfs" .
  local layer layer_size config config_size manifest manifest_size
  layer="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  layer_size="$(stat -c %s "$work/layer.tar")"
  mv "$work/layer.tar" "$work/layout/blobs/sha256/$layer"
  printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$(go_arch)" "$cmd" "$layer" > "$work/config.json"
  config="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
  config_size="$(stat -c %s "$work/config.json")"
  mv "$work/config.json" "$work/layout/blobs/sha256/$config"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$layer" "$layer_size" > "$work/manifest.json"
  manifest="$(sha256sum "$work/manifest.json" | cut -d' ' -f1)"
  manifest_size="$(stat -c %s "$work/manifest.json")"
  mv "$work/manifest.json" "$work/layout/blobs/sha256/$manifest"
  # ctr imports an OCI layout only under the io.containerd.image.name annotation (with only
  # org.opencontainers.image.ref.name it imports nothing and says nothing).
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$name" "${name##*:}" > "$work/layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out" -C "$work/layout" .
  rm -rf "$work"
}
go_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) uname -m ;;
  esac
}

ctr_() { ctr --address "$DIR/containerd.sock" --namespace k8s.io "$@"; }

containerd_ready() { ctr --address "$DIR/containerd.sock" version >/dev/null 2>&1; }

run_containerd() {
  containerd --config "$DIR/config.toml" --log-level info </dev/null >>"$DIR/logs/containerd.log" 2>&1 &
  CONTAINERD_PID=$!
  local deadline=$(( $(date +%s) + 60 ))
  until containerd_ready; do
    if ! alive "$CONTAINERD_PID"; then
      tail -n 20 "$DIR/logs/containerd.log" >&2
      die "containerd exited (log: $DIR/logs/containerd.log)"
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "containerd did not answer within 60 s (log: $DIR/logs/containerd.log)"
    sleep 0.1
  done
  echo "containerd $CONTAINERD_PID" > "$DIR/pids"
}

# import_image NAME CMD-JSON [FILE...]: build_image, then import it into the k8s.io namespace. An
# import that says nothing may still have imported nothing (seen once on a loaded machine, with
# two runtimes starting at once): it is checked and tried again, three times at most. The check
# reads the whole list (grep -q would stop at the match, and ctr, killed by SIGPIPE while it still
# writes, would fail the pipeline under pipefail: seen as "not imported").
import_image() {
  local name="$1" tar="$DIR/image.tar" try
  build_image "$1" "$2" "$tar" "${@:3}"
  for try in 1 2 3; do
    ctr_ images import "$tar" >/dev/null 2>&1 || true
    ctr_ images ls -q | grep -x "$name" >/dev/null && break
    sleep 1
  done
  rm -f "$tar"
  ctr_ images ls -q | grep -x "$name" >/dev/null || die "image $name was not imported"
}

# cmd_image DIR NAME CMD-JSON FILE...: one more image for DIR's containerd, with static binaries
# of the caller's beside busybox (test/node/env.sh: the probe target).
cmd_image() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || die "$1: no such directory"
  containerd_ready || die "containerd of $DIR does not answer (run: $0 start $DIR)"
  local f
  for f in "${@:4}"; do [ -f "$f" ] || die "$f: no such file"; done
  import_image "$2" "$3" "${@:4}"
}

cmd_start() {
  need_tools
  DIR="$1"
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  # Others may reach the socket (mktemp -d makes 0700): a test runs the agent as the DaemonSet's
  # non-root user, which the socket's own mode (0660 root:root) then admits or refuses.
  chmod 0755 "$DIR"
  if [ -f "$DIR/pids" ] && alive "$(awk '{print $2}' "$DIR/pids")"; then
    die "$DIR is in use; run: $0 stop $DIR"
  fi
  # The unix socket path must fit sockaddr_un (108 bytes) with ".ttrpc" appended.
  [ "${#DIR}" -le 80 ] || die "$DIR: path too long for containerd's socket (keep it under 80 characters)"
  write_config
  # containerd 1.6's shims keep their sockets in /run/containerd/s whatever the configuration says:
  # remember whether that directory is ours to remove (when empty) at stop.
  [ -e /run/containerd ] || touch "$DIR/run-containerd-created"
  run_containerd
  import_image "$TEST_IMAGE" '["/bin/sh"]'
  import_image "$SANDBOX_IMAGE" '["/bin/sleep","2147483647"]'
  echo "# containerd $(containerd --version | awk '{print $3}') on unix://$DIR/containerd.sock (log: $DIR/logs/containerd.log); images $TEST_IMAGE, $SANDBOX_IMAGE"
  echo "export PROBED_TEST_CRI_ENDPOINT=unix://$DIR/containerd.sock"
  echo "export PROBED_TEST_CRI_IMAGE=$TEST_IMAGE"
}

# ours PID: the process's command line names DIR (a PID the system gave to another process since,
# or anyone else's containerd, is left alone).
ours() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -q -- "$DIR"; }

# stop_pid NAME PID: SIGTERM, SIGKILL after 10 s.
stop_pid() {
  local name="$1" pid="$2" i
  alive "$pid" || return 0
  ours "$pid" || { echo "env.sh: PID $pid is not our $name; left alone" >&2; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do alive "$pid" || return 0; sleep 0.1; done
  echo "env.sh: $name ($pid) still runs 10 s after SIGTERM; SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

# shims: the PIDs of containerd-shim processes started by DIR's containerd (their command line
# names its socket).
shims() {
  local p
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "containerd-shim.*-address $DIR/containerd.sock" && echo "$p"
  done
  return 0
}

cmd_stop() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || { echo "env.sh: $1: no such directory" >&2; return 0; }
  [ -f "$DIR/config.toml" ] || die "$DIR was not set up by $0 start (no config.toml); not removed"
  local pid id
  pid="$(awk '$1 == "containerd" {print $2}' "$DIR/pids" 2>/dev/null || true)"
  if ! alive "$pid" && [ -n "$(shims)" ]; then
    # Containers are still running under their shims: containerd is needed to end them cleanly.
    run_containerd
    pid="$CONTAINERD_PID"
  fi
  if alive "$pid" && containerd_ready; then
    # Every container's processes killed, its task and container deleted (the shims exit), the
    # CRI's sandboxes with them.
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill --all --signal SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete --force "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_pid containerd "$pid"
  for pid in $(shims); do
    echo "env.sh: shim $pid still runs; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  # The test cgroup parent: any process left in it is killed, then the groups are removed.
  local cg
  for cg in /sys/fs/cgroup/*/probed-cri-test /sys/fs/cgroup/unified/probed-cri-test; do
    [ -d "$cg" ] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done
  done
  sleep 0.2
  for cg in /sys/fs/cgroup/*/probed-cri-test /sys/fs/cgroup/unified/probed-cri-test; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # Mounts containerd left under DIR (rootfs overlays, sandbox shm), deepest first.
  awk -v d="$DIR" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "env.sh: could not unmount $m" >&2
  done
  if [ -f "$DIR/run-containerd-created" ]; then
    # Only if empty: another runtime's shims may still have sockets there.
    rmdir /run/containerd/s 2>/dev/null && rmdir /run/containerd 2>/dev/null || true
  fi
  rm -rf "$DIR"
  echo "env.sh: stopped containerd of $DIR and removed it" >&2
}

cmd_daemon_stop() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || die "$1: no such directory"
  local pid
  pid="$(awk '$1 == "containerd" {print $2}' "$DIR/pids" 2>/dev/null || true)"
  alive "$pid" || { echo "env.sh: containerd of $DIR is not running" >&2; return 0; }
  stop_pid containerd "$pid"
  echo "env.sh: stopped containerd of $DIR (shims and containers still run)" >&2
}

cmd_daemon_start() {
  DIR="$(cd "$1" 2>/dev/null && pwd)" || die "$1: no such directory"
  [ -f "$DIR/config.toml" ] || die "nothing set up in $DIR (run: $0 start $DIR)"
  local pid
  pid="$(awk '$1 == "containerd" {print $2}' "$DIR/pids" 2>/dev/null || true)"
  alive "$pid" && die "containerd of $DIR already runs (PID $pid)"
  run_containerd
  echo "env.sh: started containerd of $DIR again (PID $CONTAINERD_PID)" >&2
}

case "${1:-}" in
  start) [ $# = 2 ] || die "usage: $0 start DIR"; cmd_start "$2" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  daemon-stop) [ $# = 2 ] || die "usage: $0 daemon-stop DIR"; cmd_daemon_stop "$2" ;;
  daemon-start) [ $# = 2 ] || die "usage: $0 daemon-start DIR"; cmd_daemon_start "$2" ;;
  image) [ $# -ge 4 ] || die "usage: $0 image DIR NAME CMD-JSON [FILE...]"; shift; cmd_image "$@" ;;
  *) die "usage: $0 start DIR | stop DIR | daemon-stop DIR | daemon-start DIR | image DIR NAME CMD-JSON [FILE...]" ;;
esac
