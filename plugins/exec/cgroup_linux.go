//go:build linux

package exec

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/probed/probed/internal/procstat"
	"golang.org/x/sys/unix"
)

// leafPrefix names the cgroup leaves LocalRunner creates:
// probed-exec-<pid of the creating process>-<sequence number>.
const leafPrefix = "probed-exec-"

// HostTreeKill detects, once per process, whether commands can be run in
// cgroup v2 leaves here, and reports the mode every LocalRunner without
// ProcessGroupOnly uses. The cgroup mode needs: a cgroup2 mount; this
// process's cgroup (from /proc/self/cgroup) writable, so that a leaf can be
// created in it (root, or a delegated subtree: systemd Delegate=yes); a
// kernel with cgroup.kill (5.14) and clone into a cgroup (CLONE_INTO_CGROUP,
// 5.7). The check creates a leaf, starts a process into it (a command that
// does not exist: the clone succeeds, the exec fails) and removes it. At the
// same time it kills and removes the leaves left by probed processes that no
// longer run.
func HostTreeKill() TreeKill {
	p, tk := hostCgroup()
	if p == nil {
		return tk
	}
	tk.LeafFailures = leafFailures.Load()
	return tk
}

var leafFailures atomic.Uint64

var host struct {
	once   sync.Once
	parent *cgroupParent
	info   TreeKill
}

func hostCgroup() (*cgroupParent, TreeKill) {
	host.once.Do(func() {
		p, killed, err := openCgroupParent()
		if err != nil {
			host.info = TreeKill{Mode: TreeKillProcessGroup, Reason: err.Error()}
			return
		}
		host.parent = p
		host.info = TreeKill{Mode: TreeKillCgroup, Cgroup: p.dir, LeftoversKilled: killed}
	})
	return host.parent, host.info
}

// cgroupParent is this process's own cgroup v2 directory, in which one
// leaf per command is created. No-internal-processes rule: a non-root
// cgroup that holds processes (this one holds probed) cannot have
// controllers enabled for its children, so its children carry no
// controllers and may hold processes themselves; creating leaves beside
// probed's own processes is therefore always allowed, and probed need not
// move itself into a leaf of its own. (In the root cgroup the rule does not
// apply at all.)
type cgroupParent struct {
	mount  string // the cgroup2 mount point
	dir    string
	prefix string // leafPrefix + pid + "-"
	seq    atomic.Uint64

	mu      sync.Mutex
	pending []string // leaves whose removal failed: retried on the next run
}

func openCgroupParent() (*cgroupParent, int, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, 0, err
	}
	rel, err := ownCgroup()
	if err != nil {
		return nil, 0, err
	}
	dir := filepath.Join(mount, rel)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, 0, fmt.Errorf("this process's cgroup %s is not visible under the cgroup2 mount %s", rel, mount)
	}
	p := &cgroupParent{mount: mount, dir: dir, prefix: leafPrefix + strconv.Itoa(os.Getpid()) + "-"}
	killed := p.removeLeftovers()
	if err := p.check(); err != nil {
		return nil, killed, err
	}
	return p, killed, nil
}

// check creates a leaf, clones a process into it and removes it.
func (p *cgroupParent) check() error {
	l, err := p.newLeaf()
	if err != nil {
		return err
	}
	defer l.remove(time.Second)
	if _, err := os.Stat(filepath.Join(l.dir, "cgroup.kill")); err != nil {
		return fmt.Errorf("cgroup %s has no cgroup.kill (kernel older than 5.14)", p.dir)
	}
	_, err = syscall.ForkExec("/nonexistent/probed-cgroup-check", []string{"probed-cgroup-check"},
		&syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: l.fd}})
	l.closeFD()
	if !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("starting a process in cgroup %s: %v", l.dir, err)
	}
	return nil
}

// removeLeftovers kills and removes the leaves of probed processes that no
// longer run (their pid has no /proc entry), and returns how many. Pids are
// read in this process's PID namespace: two probed processes sharing one
// cgroup from different PID namespaces would mistake each other's leaves
// for leftovers (container runtimes give each container its own cgroup).
func (p *cgroupParent) removeLeftovers() int {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), leafPrefix)
		if !e.IsDir() || !ok {
			continue
		}
		pidText, _, ok := strings.Cut(name, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidText); err == nil {
			continue // its probed still runs (or the pid was reused: leave it)
		}
		l := &leaf{dir: filepath.Join(p.dir, e.Name()), fd: -1}
		l.kill()
		if l.remove(time.Second) == nil {
			n++
		}
	}
	return n
}

// newLeaf creates the next leaf and opens it for clone into the cgroup.
// Leaves whose removal failed before are retried first.
func (p *cgroupParent) newLeaf() (*leaf, error) {
	p.retryPending()
	dir := filepath.Join(p.dir, p.prefix+strconv.FormatUint(p.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup leaf: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(dir)
		return nil, fmt.Errorf("opening cgroup leaf: %w", err)
	}
	return &leaf{parent: p, dir: dir, fd: fd}, nil
}

func (p *cgroupParent) retryPending() {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.pending[:0]
	for _, dir := range p.pending {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			kept = append(kept, dir)
		}
	}
	p.pending = kept
}

// leaf is the cgroup of one command.
type leaf struct {
	parent *cgroupParent // nil for leftovers
	dir    string
	fd     int // open until the command started; -1 afterwards
}

func (l *leaf) closeFD() {
	if l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}

// kill sends SIGKILL to every process in the leaf (cgroup.kill: atomic
// with respect to forks, so nothing started meanwhile escapes).
func (l *leaf) kill() {
	_ = os.WriteFile(filepath.Join(l.dir, "cgroup.kill"), []byte("1"), 0)
}

// remove waits, up to within, for the leaf to hold no live process
// (cgroup.events "populated 0"; zombies do not count), then removes it.
// A leaf that cannot be removed yet is retried on the next run.
func (l *leaf) remove(within time.Duration) error {
	l.closeFD()
	deadline := time.Now().Add(within)
	for {
		err := unix.Rmdir(l.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			if l.parent != nil {
				l.parent.mu.Lock()
				l.parent.pending = append(l.parent.pending, l.dir)
				l.parent.mu.Unlock()
			}
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// reapZombies reaps the dead processes of the leaf that are children of
// this process: the command's descendants re-parented to probed when it is
// PID 1 or a child subreaper (see reapGroup). A zombie leaves cgroup.procs
// but /proc/PID/cgroup still names its cgroup, which tells the leaf's
// zombies from other commands' children.
func (l *leaf) reapZombies() {
	self := os.Getpid()
	want := "0::/" + strings.TrimPrefix(strings.TrimPrefix(l.dir, l.parent.mount), "/")
	for _, p := range procstat.All() {
		if p.State != 'Z' || p.PPID != self {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID))
		if err != nil || !hasLine(cg, want) {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(p.PID, &ws, unix.WNOHANG, nil)
	}
}

func hasLine(b []byte, line string) bool {
	for l := range strings.SplitSeq(string(b), "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// isReaper reports whether orphans of this process's descendants become
// its children: PID 1 of its namespace or a child subreaper.
func isReaper() bool {
	if os.Getpid() == 1 {
		return true
	}
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return false
	}
	return v != 0
}

// cgroup2Mount returns the mount point of the cgroup2 file system
// (/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a hybrid
// one), from /proc/self/mountinfo.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, fsFields := strings.Fields(pre), strings.Fields(post)
		if len(fields) >= 5 && len(fsFields) >= 1 && fsFields[0] == "cgroup2" {
			return unescapeMount(fields[4]), nil
		}
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup returns this process's cgroup v2 path ("0::<path>" in
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rel, ok := strings.CutPrefix(l, "0::"); ok {
			if strings.Contains(rel, "..") {
				return "", fmt.Errorf("this process's cgroup %q is outside its cgroup namespace", rel)
			}
			return rel, nil
		}
	}
	return "", errors.New("this process has no cgroup v2 membership (/proc/self/cgroup has no 0:: line)")
}
