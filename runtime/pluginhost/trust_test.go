package pluginhost_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// copyPlugin copies the test plugin into dir (a copy, not a link: modes
// changed on it must not reach the shared binary) and returns its path.
func copyPlugin(t *testing.T, dir string) string {
	t.Helper()
	src, err := os.Open(testPlugin())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "testplugin")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// mkdir makes dir with exactly mode (no umask) and returns it.
func mkdir(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStrictModesRefuseReplaceablePlugins: a plugin
// directory or binary that someone other than root or probed's user could
// replace is refused, as sshd's StrictModes refuses such files: writable by
// others or by the group (the file, the directory or a directory above
// them, on the given and on the resolved path of a symlink), or owned by
// another user. The error names the path and why; no plugin process is
// started. A world-writable directory with the sticky bit (like /tmp)
// above a safe one is accepted.
func TestStrictModesRefuseReplaceablePlugins(t *testing.T) {
	t.Parallel()
	type setup struct {
		opts pluginhost.Options
		want []string // parts of the error; none: New succeeds
	}
	cases := map[string]func(t *testing.T, root string) setup{
		"plugin directory writable by others": func(t *testing.T, root string) setup {
			dir := mkdir(t, filepath.Join(root, "plugins"), 0o777)
			copyPlugin(t, dir)
			return setup{pluginhost.Options{Dir: dir}, []string{"plugin directory " + dir + ": refused: " + dir + " is writable by others (mode drwxrwxrwx"}}
		},
		"plugin directory writable by its group": func(t *testing.T, root string) setup {
			dir := mkdir(t, filepath.Join(root, "plugins"), 0o775)
			copyPlugin(t, dir)
			return setup{pluginhost.Options{Dir: dir}, []string{"plugin directory " + dir + ": refused: " + dir + " is writable by its group", "chmod go-w"}}
		},
		"a directory above it writable by others": func(t *testing.T, root string) setup {
			parent := mkdir(t, filepath.Join(root, "shared"), 0o777)
			dir := mkdir(t, filepath.Join(parent, "plugins"), 0o755)
			copyPlugin(t, dir)
			return setup{pluginhost.Options{Dir: dir}, []string{"plugin directory " + dir + ": refused: directory " + parent + " is writable by others"}}
		},
		"plugin binary writable by its group": func(t *testing.T, root string) setup {
			dir := mkdir(t, filepath.Join(root, "plugins"), 0o755)
			bin := copyPlugin(t, dir)
			if err := os.Chmod(bin, 0o775); err != nil {
				t.Fatal(err)
			}
			return setup{pluginhost.Options{Dir: dir}, []string{`plugin "testplugin": binary ` + bin + ": refused: " + bin + " is writable by its group (mode -rwxrwxr-x"}}
		},
		"configured binary in a directory writable by others": func(t *testing.T, root string) setup {
			dir := mkdir(t, filepath.Join(root, "open"), 0o777)
			bin := copyPlugin(t, dir)
			return setup{pluginhost.Options{Plugins: []pluginhost.PluginConfig{{Name: "p", Path: bin}}},
				[]string{`plugin "p": binary ` + bin + ": refused: directory " + dir + " is writable by others"}}
		},
		"symlink to a binary in a directory writable by others": func(t *testing.T, root string) setup {
			open := mkdir(t, filepath.Join(root, "open"), 0o777)
			bin := copyPlugin(t, open)
			dir := mkdir(t, filepath.Join(root, "plugins"), 0o755)
			if err := os.Symlink(bin, filepath.Join(dir, "linked")); err != nil {
				t.Fatal(err)
			}
			return setup{pluginhost.Options{Dir: dir}, []string{`plugin "linked": binary ` + filepath.Join(dir, "linked") + ": refused: directory " + open + " is writable by others"}}
		},
		"binary owned by another user": func(t *testing.T, root string) setup {
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			dir := mkdir(t, filepath.Join(root, "plugins"), 0o755)
			bin := copyPlugin(t, dir)
			if err := os.Chown(bin, 12345, 12345); err != nil {
				t.Fatal(err)
			}
			return setup{pluginhost.Options{Dir: dir}, []string{`plugin "testplugin": binary ` + bin + ": refused: " + bin + " is owned by another user (mode -rwxr-xr-x, owner uid 12345)"}}
		},
		"sticky world-writable directory above a safe one": func(t *testing.T, root string) setup {
			sticky := mkdir(t, filepath.Join(root, "tmp"), 0o777|os.ModeSticky)
			dir := mkdir(t, filepath.Join(sticky, "plugins"), 0o755)
			copyPlugin(t, dir)
			return setup{opts: pluginhost.Options{Dir: dir}}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			s := mk(t, root)
			logs := &testlog.Buffer{}
			s.opts.Logger = newLogger(logs)
			h, err := newReturns(t, s.opts)
			if len(s.want) == 0 {
				if err != nil || len(h.Status()) != 1 || !h.Status()[0].Running {
					t.Fatalf("New: %v, want the plugin running", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error with %q", s.want)
			}
			for _, w := range s.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if kids := pluginhosttest.Children(os.Getpid(), root); len(kids) != 0 {
				t.Errorf("plugin processes started: %v", kids)
			}
		})
	}
}

// TestStrictModesCheckedAtRestart: a binary made group-writable after the
// plugin started is not started again when the plugin dies: the restart
// fails with the reason, shown as the plugin's last error.
func TestStrictModesCheckedAtRestart(t *testing.T) {
	t.Parallel()
	dir := mkdir(t, filepath.Join(t.TempDir(), "plugins"), 0o755)
	bin := copyPlugin(t, dir)
	h, _ := startHost(t, pluginhost.Options{Dir: dir})
	pid := h.Status()[0].PID
	if err := os.Chmod(bin, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a restart refused for the binary's mode", func() bool {
		s := h.Status()[0]
		return !s.Running && strings.Contains(s.LastError, bin+" is writable by its group")
	})
}
