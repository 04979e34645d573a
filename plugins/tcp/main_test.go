package tcp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind.
// Goroutines running before the tests (package init, such as the ants
// default pool pulled in by package runtime) are not leaks.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }
