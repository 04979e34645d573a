package state

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/store"
)

func samplePods() []store.SavedPod {
	started := true
	return []store.SavedPod{{
		UID: "uid-1", Namespace: "ns", Name: "web",
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app", ContainerID: "probed://abc", RestartCount: 3, Ready: true, Started: &started,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(1700000000, 0))}},
			}},
		},
	}}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, samplePods(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].UID != "uid-1" || got[0].Status.ContainerStatuses[0].RestartCount != 3 ||
		got[0].Status.ContainerStatuses[0].ContainerID != "probed://abc" || !got[0].Status.ContainerStatuses[0].Ready {
		t.Fatalf("round trip = %+v", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("state file mode: %v %v (want private)", fi.Mode(), err)
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	got, err := Load(t.TempDir())
	if err != nil || got != nil {
		t.Fatalf("Load of an empty dir = %v, %v", got, err)
	}
}

// A corrupt or foreign file is reported, naming the file, and ignored.
func TestLoadCorruptOrForeign(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":     `{"kind":"ProbedState","apiVersion":"probed.io/v1","pods":[{"uid":"a"`,
		"not json":      "hello",
		"foreign":       `{"kind":"Something","apiVersion":"v1","pods":[]}`,
		"unknown field": `{"kind":"ProbedState","apiVersion":"probed.io/v1","pods":[],"extra":1}`,
		"no uid":        `{"kind":"ProbedState","apiVersion":"probed.io/v1","pods":[{"namespace":"a"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), path) || got != nil {
				t.Fatalf("Load = %v, %v; want an error naming %s", got, err, path)
			}
		})
	}
}

// A crash mid-write leaves a temporary file and the previous state intact:
// the next Load reads the previous state and removes the leftover.
func TestCrashMidWriteKeepsPreviousState(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, samplePods(), time.Now()); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, ".probed-state-123.tmp")
	if err := os.WriteFile(leftover, []byte(`{"kind":"ProbedState","pods":[{"ui`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || len(got) != 1 {
		t.Fatalf("Load after an interrupted write = %v, %v", got, err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("leftover temporary file not removed: %v", err)
	}
	// Saving again replaces the file whole.
	if err := Save(dir, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(dir); err != nil || len(got) != 0 {
		t.Fatalf("after saving no pods: %v, %v", got, err)
	}
}

// TestLoadRefusesSpecialFiles: a state file that is a FIFO (no writer),
// a symlink to /dev/zero or a directory is refused at once, naming the file
// and what it is, instead of hanging or reading without end;
// a state file over MaxFileBytes is refused naming the limit.
func TestLoadRefusesSpecialFiles(t *testing.T) {
	for what, create := range map[string]func(path string) error{
		"a FIFO (named pipe)": func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"a character device":  func(p string) error { return os.Symlink("/dev/zero", p) },
		"a directory":         func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := create(path); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := Load(dir); done <- err }()
		select {
		case err := <-done:
			want := "state file " + path + ": is " + what + ", not a regular file; ignoring it"
			if err == nil || err.Error() != want {
				t.Errorf("%s: %v, want %q", what, err, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Load of %s did not return", what)
		}
		// The next Save replaces it.
		if what != "a directory" {
			if err := Save(dir, samplePods(), time.Now()); err != nil {
				t.Fatal(err)
			}
			if got, err := Load(dir); err != nil || len(got) != 1 {
				t.Errorf("%s replaced by Save: %v, %v", what, got, err)
			}
		}
	}
	dir := t.TempDir()
	big, err := os.Create(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "more than the limit of 67108864 bytes") {
		t.Errorf("oversized state file: %v", err)
	}
}
