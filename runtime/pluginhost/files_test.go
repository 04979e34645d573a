package pluginhost_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// newReturns runs pluginhost.New, failing the test when it does not
// return: the defects under test are reads that block.
func newReturns(t *testing.T, opts pluginhost.Options) (*pluginhost.Host, error) {
	t.Helper()
	type result struct {
		h   *pluginhost.Host
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := pluginhost.New(context.Background(), opts)
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		if r.h != nil {
			t.Cleanup(func() { _ = r.h.Close(context.Background()) })
		}
		return r.h, r.err
	case <-time.After(60 * time.Second):
		t.Fatal("pluginhost.New did not return")
		return nil, nil
	}
}

// TestRequirePin: with RequirePin, a plugin without a sha256 pin stops
// New with an error naming it and giving its binary's SHA-256, and no
// plugin process is left; pinned plugins start. Without RequirePin the
// unpinned plugin starts and one WARN line names every unpinned plugin.
func TestRequirePin(t *testing.T) {
	t.Parallel()
	path := privatePlugin(t)
	good := sha256Of(t, path)
	pinned := pluginhost.PluginConfig{Name: "pinned", Path: path, SHA256: good, Env: map[string]string{"TESTPLUGIN_KINDS": "pinned-kind"}}
	unpinned := pluginhost.PluginConfig{Name: "loose", Path: path}

	logs := &testlog.Buffer{}
	_, err := newReturns(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{pinned, unpinned}, RequirePin: true, Logger: newLogger(logs)})
	want := `plugin "loose" (` + path + `) has no sha256 pin and pins are required (RequirePin, --require-plugin-pin); its sha256 is ` + good
	if err == nil || err.Error() != want {
		t.Errorf("New with an unpinned plugin: %v\nwant %q", err, want)
	}
	if kids := pluginhosttest.Children(os.Getpid(), filepath.Dir(path)); len(kids) != 0 {
		t.Errorf("plugin processes running after the refusal: %v", kids)
	}

	h, logs := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{pinned}, RequirePin: true})
	if s := h.Status(); len(s) != 1 || !s[0].Running || !s[0].Pinned {
		t.Errorf("pinned plugin with RequirePin: %+v", s)
	}
	if strings.Contains(logs.String(), "unpinned") {
		t.Errorf("all plugins pinned, but the log says some are not:\n%s", logs)
	}

	_, logs = startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{pinned, unpinned}})
	lines := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "plugins run unpinned") {
			lines++
			if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "plugins=[loose]") {
				t.Errorf("unpinned line %q: want WARN naming [loose] only", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d lines about unpinned plugins, want 1:\n%s", lines, logs)
	}
}

// TestPinnedBinaryNotRegular: a pinned plugin path that is a FIFO without
// a writer or a symlink to /dev/zero is refused at once, naming the file
// and what it is, instead of blocking or hashing without end.
func TestPinnedBinaryNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo-plugin")
	if err := syscall.Mkfifo(fifo, 0o700); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero-plugin")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for what, path := range map[string]string{"a FIFO (named pipe)": fifo, "a character device": zero} {
		_, err := newReturns(t, pluginhost.Options{
			Plugins: []pluginhost.PluginConfig{{Name: "p", Path: path, SHA256: strings.Repeat("ab", 32)}},
			Logger:  newLogger(&testlog.Buffer{}),
		})
		want := `plugin "p": refusing to start ` + path + ": cannot verify its sha256: " + path + ": is " + what + ", not a regular file"
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v\nwant %q", what, err, want)
		}
		// RequirePin computes the sum to suggest: also without blocking.
		_, err = newReturns(t, pluginhost.Options{
			Plugins: []pluginhost.PluginConfig{{Name: "p", Path: path}}, RequirePin: true,
			Logger: newLogger(&testlog.Buffer{}),
		})
		if err == nil || !strings.Contains(err.Error(), "its sha256 cannot be computed: "+path+": is "+what) {
			t.Errorf("%s, RequirePin: %v", what, err)
		}
	}
}

// TestConfigFileNotRegular: a plugin configuration file that is a FIFO, a
// symlink to /dev/zero or larger than MaxConfigBytes is refused, naming it.
func TestConfigFileNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("plugins: []\n"+strings.Repeat("#\n", pluginhost.MaxConfigBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo: fifo + ": is a FIFO (named pipe), not a regular file",
		zero: zero + ": is a character device, not a regular file",
		big:  big + ": file is 2097164 bytes, more than the limit of 1048576 bytes",
	} {
		_, err := newReturns(t, pluginhost.Options{ConfigFile: path, Logger: newLogger(&testlog.Buffer{})})
		if err == nil || err.Error() != "plugin config: "+want {
			t.Errorf("%v\nwant %q", err, "plugin config: "+want)
		}
	}
}

// TestKillLeavesNoStaleSocket: the unix socket of a plugin killed with
// SIGKILL is removed when the plugin restarts, the restarted plugin serves,
// and Close removes the host's socket directory (every kill -9
// used to leave a socket in /tmp).
func TestKillLeavesNoStaleSocket(t *testing.T) {
	t.Parallel()
	h, err := pluginhost.New(context.Background(), pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}, Logger: newLogger(&testlog.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = h.Close(context.Background())
		}
	})
	old := pidOf(t, h, "t")
	oldSockets := pluginhosttest.UnixSockets(old)
	if len(oldSockets) == 0 {
		t.Fatalf("plugin process %d holds no unix socket with a path", old)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, parallelStartWithin, "plugin serving again after kill -9", func() bool {
		out, err := probeOnce(t, h, testSpec("test", 1, nil))
		return err == nil && out.Result == runtime.Success
	})
	for _, s := range oldSockets {
		if _, err := os.Lstat(s); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket %s of the killed plugin still there after the restart (%v)", s, err)
		}
	}
	newSockets := pluginhosttest.UnixSockets(pidOf(t, h, "t"))
	if len(newSockets) == 0 {
		t.Fatal("restarted plugin holds no unix socket with a path")
	}
	for _, s := range newSockets {
		if _, err := os.Lstat(s); err != nil {
			t.Errorf("socket of the restarted plugin: %v", err)
		}
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, s := range newSockets {
		// <host socket directory>/<plugin>/<socket>
		hostDir := filepath.Dir(filepath.Dir(s))
		if _, err := os.Lstat(hostDir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket directory %s left after Close (%v)", hostDir, err)
		}
	}
}

// TestStaleSocketDirsRemoved: a socket directory left by an agent that was
// killed (its lock free) is removed when a host starts; one whose lock is
// held (a live agent, maybe in another PID namespace) is kept; the host's
// own directory lives until Close.
func TestStaleSocketDirsRemoved(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	mk := func(name string) (dir string, lock *os.File) {
		dir = filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "0"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "0", "plugin123"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		lock, err := os.Create(filepath.Join(dir, ".lock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lock.Close() })
		return dir, lock
	}
	stale, staleLock := mk("probed-plugins-1")
	staleLock.Close()
	live, liveLock := mk("probed-plugins-2")
	if err := syscall.Flock(int(liveLock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	h, err := pluginhost.New(context.Background(), pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}, SocketDir: base, Logger: newLogger(&testlog.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale socket directory %s kept (%v)", stale, err)
	}
	if _, err := os.Lstat(filepath.Join(live, "0", "plugin123")); err != nil {
		t.Errorf("live agent's socket directory touched: %v", err)
	}
	own := pluginhosttest.UnixSockets(pidOf(t, h, "t"))
	if len(own) == 0 || !strings.HasPrefix(own[0], base+"/probed-plugins-") {
		t.Errorf("plugin sockets %v, want them under %s", own, base)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(base, "probed-plugins-*"))
	if len(left) != 1 || left[0] != live {
		t.Errorf("after Close: %v, want only %s", left, live)
	}
}
