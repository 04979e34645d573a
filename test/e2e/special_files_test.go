package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Through the real binary: files that are not regular files
// (a FIFO without a writer, /dev/zero: size 0 but endless) in the manifest
// directory or as the state file used to hang probed (no listener, --for
// and SIGTERM ignored) or kill it (out of memory).

const plainPod = `apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: e2e}
spec:
  containers:
  - {name: app, image: example/app}
`

// specialLinks makes manifest-named symlinks in dir to a new FIFO (kept
// in another directory) and to /dev/zero; prefix names them.
func specialLinks(t *testing.T, dir, prefix string) (fifo, zero string) {
	t.Helper()
	target := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(target, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo, zero = filepath.Join(dir, prefix+"fifo.yaml"), filepath.Join(dir, prefix+"zero.yaml")
	for link, to := range map[string]string{fifo: target, zero: "/dev/zero"} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
	return fifo, zero
}

// rejected reports whether probed logged a rejection naming path and what
// it is.
func rejected(p *proc, path, what string) bool {
	for _, l := range p.logs() {
		if strings.Contains(l.str("err"), path+": is "+what+", not a regular file") {
			return true
		}
	}
	return false
}

// waitPods waits until /pods lists exactly the pods named (namespace e2e).
func waitPods(t *testing.T, p *proc, base string, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want["e2e/"+n] = true
	}
	eventually(t, p, 20*time.Second, fmt.Sprintf("/pods listing %v", names), func() (bool, string) {
		l, err := getPods(base)
		if err != nil {
			return false, err.Error()
		}
		got := podNames(l)
		if len(got) != len(want) {
			return false, strings.Join(got, ",")
		}
		for _, n := range got {
			if !want[n] {
				return false, strings.Join(got, ",")
			}
		}
		return true, ""
	})
}

// rssBytes is the resident set size of process pid.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// maxRSS bounds the agent's memory in these tests: reading /dev/zero used
// to take it to an out-of-memory crash.
const maxRSS = 300 << 20

// TestRunSpecialManifestFilesAtStart: a manifest directory holding a
// symlink to a FIFO and one to /dev/zero beside a valid pod: probed starts,
// serves /pods with the valid pod, names both files in its log, and stops
// by itself after --for (exit 0).
func TestRunSpecialManifestFilesAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), fmt.Sprintf(plainPod, "good"))
	fifo, zero := specialLinks(t, dir, "")
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--for", "8s")
	waitAPI(t, p, base, true)
	waitPods(t, p, base, "good")
	eventually(t, p, 10*time.Second, "both special files named in the log", func() (bool, string) {
		return rejected(p, fifo, "a FIFO (named pipe)") && rejected(p, zero, "a character device"), tail(p.stderr.String(), 10)
	})
	if rss := rssBytes(t, p.cmd.Process.Pid); rss > maxRSS {
		t.Errorf("RSS %d MiB, want at most %d MiB", rss>>20, maxRSS>>20)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("probed did not stop after --for 8s; stderr:\n%s", tail(p.stderr.String(), 20))
	}
	if code := exitCode(p.err); code != 0 {
		t.Errorf("exit code %d after --for, want 0; stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
}

// TestRunSpecialManifestFilesAddedWhileRunning: a FIFO and a /dev/zero
// symlink added to the watched directory are named in the log, a pod
// written after them is still picked up, and SIGTERM stops probed (exit 0).
func TestRunSpecialManifestFilesAddedWhileRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), fmt.Sprintf(plainPod, "good"))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--rescan-interval", "500ms")
	waitAPI(t, p, base, true)
	waitPods(t, p, base, "good")
	fifo, zero := specialLinks(t, dir, "late-")
	eventually(t, p, 10*time.Second, "both special files named in the log", func() (bool, string) {
		return rejected(p, fifo, "a FIFO (named pipe)") && rejected(p, zero, "a character device"), tail(p.stderr.String(), 10)
	})
	writeFile(t, filepath.Join(dir, "after.yaml"), fmt.Sprintf(plainPod, "after"))
	waitPods(t, p, base, "good", "after")
	if rss := rssBytes(t, p.cmd.Process.Pid); rss > maxRSS {
		t.Errorf("RSS %d MiB, want at most %d MiB", rss>>20, maxRSS>>20)
	}
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
}

// TestRunSpecialStateFile: a --state-dir whose state file is a FIFO, or a
// symlink to /dev/zero: probed starts without the state, says why naming
// the file, serves /pods, stops on SIGTERM, and its final write replaces
// the file with a real state file.
func TestRunSpecialStateFile(t *testing.T) {
	t.Parallel()
	for what, create := range map[string]func(path string) error{
		"a FIFO (named pipe)": func(path string) error { return syscall.Mkfifo(path, 0o600) },
		"a character device":  func(path string) error { return os.Symlink("/dev/zero", path) },
	} {
		t.Run(strings.Fields(what)[1], func(t *testing.T) {
			t.Parallel()
			dir, stateDir := t.TempDir(), t.TempDir()
			writeFile(t, filepath.Join(dir, "good.yaml"), fmt.Sprintf(plainPod, "good"))
			stateFile := filepath.Join(stateDir, "probed-state.json")
			if err := create(stateFile); err != nil {
				t.Fatal(err)
			}
			listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
			base := "http://" + listen
			p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--state-dir", stateDir)
			waitAPI(t, p, base, true)
			waitPods(t, p, base, "good")
			want := "state file " + stateFile + ": is " + what + ", not a regular file"
			found := false
			for _, l := range p.logs() {
				if l.str("msg") == "state not restored" && strings.Contains(l.str("err"), want) {
					found = true
				}
			}
			if !found {
				t.Errorf("no \"state not restored\" line with %q:\n%s", want, tail(p.stderr.String(), 20))
			}
			if rss := rssBytes(t, p.cmd.Process.Pid); rss > maxRSS {
				t.Errorf("RSS %d MiB, want at most %d MiB", rss>>20, maxRSS>>20)
			}
			if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr.String(), 20))
			}
			if fi, err := os.Lstat(stateFile); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("state file after shutdown: %v, %v; want a regular file", fi, err)
			}
		})
	}
}
