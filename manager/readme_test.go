package manager_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeMarker precedes the README's library example.
const readmeMarker = "<!-- The program below is manager/example_test.go's Example_readme as a main package: TestREADMEExampleIsTheExample keeps them equal. -->"

// readmeProgram is example_test.go as the README shows it, a complete
// program: package main, Example_readme as main, without its Output
// comment (the test suite runs the example and checks that output).
func readmeProgram(example string) string {
	s := strings.Replace(example, "package manager_test\n", "package main\n", 1)
	s = strings.Replace(s, "func Example_readme() {\n", "func main() {\n", 1)
	return regexp.MustCompile(`(?s)\n\t// Output:\n(\t//[^\n]*\n)*`).ReplaceAllString(s, "\n")
}

// TestREADMEExampleIsTheExample: the README's library example
// is example_test.go, which `go test` compiles and runs (Example_readme and
// its Output), so neither can rot: this test fails when they differ, and
// prints the block the README needs.
func TestREADMEExampleIsTheExample(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := readmeProgram(string(example))
	_, after, ok := strings.Cut(string(readme), readmeMarker+"\n\n```go\n")
	if !ok {
		t.Fatalf("README.md has no library example after the marker %q", readmeMarker)
	}
	got, _, ok := strings.Cut(after, "```\n")
	if !ok {
		t.Fatal("README.md: the library example's code block does not end")
	}
	if got != want {
		t.Errorf("README.md's library example differs from example_test.go; the README's block should be:\n```go\n%s```", want)
	}
	if !strings.Contains(want, "package main\n") || !strings.Contains(want, "func main() {\n") || strings.Contains(want, "// Output:") {
		t.Errorf("the README's program is not a main package:\n%s", want)
	}
}
