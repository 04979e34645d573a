package source_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/internal/testlog"
)

// specialManifests adds to dir manifest-named symlinks to a FIFO without a
// writer, /dev/zero (size 0, endless content), a socket and a directory,
// and returns the description each error must give, by link path.
func specialManifests(t *testing.T, dir string) map[string]string {
	t.Helper()
	elsewhere := t.TempDir()
	fifo := filepath.Join(elsewhere, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(elsewhere, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := map[string]string{}
	for name, c := range map[string]struct{ target, what string }{
		"fifo.yaml": {fifo, "a FIFO (named pipe)"},
		"zero.yaml": {"/dev/zero", "a character device"},
		"sock.json": {sock, "a socket"},
		"dir.yml":   {elsewhere, "a directory"},
	} {
		link := filepath.Join(dir, name)
		if err := os.Symlink(c.target, link); err != nil {
			t.Fatal(err)
		}
		out[link] = c.what
	}
	return out
}

// scanReturns runs s.Scan, failing the test when it does not return: the
// defect under test is a scan that blocks on a FIFO.
func scanReturns(t *testing.T, s *source.Source) source.Snapshot {
	t.Helper()
	done := make(chan source.Snapshot, 1)
	go func() { done <- s.Scan() }()
	select {
	case snap := <-done:
		return snap
	case <-time.After(20 * time.Second):
		t.Fatal("Scan did not return (blocked on a special file)")
		return source.Snapshot{}
	}
}

// TestScan_SpecialFilesRefusedOthersLoad: symlinks to a FIFO, /dev/zero, a
// socket and a directory do not hang or exhaust the scan; each
// is one error naming the file and what it is, logged once, and the valid
// pod beside them loads.
func TestScan_SpecialFilesRefusedOthersLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.yaml", podYAML("good", "8080"))
	special := specialManifests(t, dir)
	logs := &testlog.Buffer{}
	s := newSource(t, dir, logs)
	snap := scanReturns(t, s)
	if pods := byName(snap); len(pods) != 1 || pods["default/good"] == nil {
		t.Errorf("pods %v, want default/good", pods)
	}
	if len(snap.Errors) != len(special) {
		t.Errorf("errors:\n%s\nwant one per special file (%d)", errorsText(snap), len(special))
	}
	text := errorsText(snap)
	for path, what := range special {
		want := path + ": is " + what + ", not a regular file"
		if !strings.Contains(text, want) {
			t.Errorf("no error %q in:\n%s", want, text)
		}
		if n := logs.Count(path + ":"); n != 1 {
			t.Errorf("%s logged %d times, want once", path, n)
		}
	}
	scanReturns(t, s)
	for path := range special {
		if n := logs.Count(path + ":"); n != 1 {
			t.Errorf("after a second scan %s logged %d times, want once", path, n)
		}
	}
}

// TestScan_OversizedManifestRefused: a manifest over the limit is refused
// naming the file and the limit; at the limit it loads.
func TestScan_OversizedManifestRefused(t *testing.T) {
	dir := t.TempDir()
	content := podYAML("big", "8080")
	path := write(t, dir, "big.yaml", content)
	s, err := source.New(source.Options{Path: dir, Manifest: manifest.Options{MaxFileBytes: int64(len(content) - 1)}})
	if err != nil {
		t.Fatal(err)
	}
	snap := s.Scan()
	want := path + ": file is " + itoa(len(content)) + " bytes, more than the limit of " + itoa(len(content)-1) + " bytes (Options.MaxFileBytes)"
	if len(snap.Pods) != 0 || len(snap.Errors) != 1 || snap.Errors[0].Error() != want {
		t.Errorf("pods %d, errors:\n%s\nwant %q", len(snap.Pods), errorsText(snap), want)
	}
	s, _ = source.New(source.Options{Path: dir, Manifest: manifest.Options{MaxFileBytes: int64(len(content))}})
	if snap := s.Scan(); len(snap.Pods) != 1 || len(snap.Errors) != 0 {
		t.Errorf("at the limit: pods %d, errors %s", len(snap.Pods), errorsText(snap))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestWatch_SpecialFileAddedWhileRunning: a FIFO or /dev/zero symlink added
// to a watched directory is reported, files written after it are still
// picked up, and Watch returns when its context ends (the watch
// used to block on the FIFO, and with it SIGTERM).
func TestWatch_SpecialFileAddedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	logs := &testlog.Buffer{}
	s := newSource(t, dir, logs)
	snaps := make(chan source.Snapshot, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, func(snap source.Snapshot) { snaps <- snap }) }()
	wait := func(what string, ok func(source.Snapshot) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case snap := <-snaps:
				if ok(snap) {
					return
				}
			case <-deadline:
				t.Fatalf("no snapshot with %s", what)
			}
		}
	}
	write(t, dir, "a.yaml", podYAML("a", "8080"))
	wait("pod a", func(snap source.Snapshot) bool { return byName(snap)["default/a"] != nil })
	special := specialManifests(t, dir)
	wait("the special files refused", func(snap source.Snapshot) bool { return len(snap.Errors) == len(special) })
	write(t, dir, "b.yaml", podYAML("b", "8081"))
	wait("pod b after the special files", func(snap source.Snapshot) bool {
		p := byName(snap)
		return p["default/a"] != nil && p["default/b"] != nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
	for path := range special {
		if logs.Count(path+":") == 0 {
			t.Errorf("%s not logged", path)
		}
	}
}
