package exec_test

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/plugins/exec"
)

// TestE1_ExpandCommand covers the $(VAR) rules of spec E1 one by one.
func TestE1_ExpandCommand(t *testing.T) {
	env := []v1.EnvVar{
		{Name: "A", Value: "script"},
		{Name: "EMPTY", Value: ""},
		{Name: "REF", Value: "$(A)"},
		{Name: "DUP", Value: "first"},
		{Name: "DUP", Value: "last"},
		{Name: "FROM", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}},
		{Name: "", Value: "nameless"},
	}
	cases := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"some $(A) $(B)", "some script $(B)"}, // PR1
		{"$(A)$(A)", "scriptscript"},
		{"[$(EMPTY)]", "[]"},
		{"[$(FROM)]", "[]"},        // declared with valueFrom: empty
		{"$(REF)", "$(A)"},         // values are not expanded again
		{"$(DUP)", "last"},         // last declaration wins
		{"$$", "$"},                // escape
		{"$$(A)", "$(A)"},          // escaped reference
		{"$$$(A)", "$script"},      // escape, then reference
		{"$$$", "$$"},              // escape, then trailing $
		{"a$", "a$"},               // trailing $
		{"$x$(A)", "$xscript"},     // $ not starting a reference
		{"$(A", "$(A"},             // unterminated
		{"$($(A)", "$($(A)"},       // the name runs to the first ')': "$(A", undeclared
		{"$(x $$", "$(x $"},        // unterminated: kept, scanning resumes after "$("
		{"$()", "nameless"},        // the empty name is a name
		{"$(a b)", "$(a b)"},       // undeclared, kept verbatim
		{"$((A))", "$((A))"},       // name "(A" undeclared
		{"$(A))", "script)"},       //
		{"é$(A)ü$é", "éscriptü$é"}, // multi-byte text is untouched
		{"${A} $A", "${A} $A"},     // only $(...) is a reference
		{"$(B)$(A)$(C)", "$(B)script$(C)"},
	}
	for _, tc := range cases {
		got := exec.ExpandCommand([]string{tc.in}, env)
		if !reflect.DeepEqual(got, []string{tc.want}) {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got[0], tc.want)
		}
	}
	if got := exec.ExpandCommand(nil, env); got != nil {
		t.Errorf("expand(nil) = %q, want nil", got)
	}
	in := []string{"x", "$(A)"}
	if got := exec.ExpandCommand(in, nil); !reflect.DeepEqual(got, []string{"x", "$(A)"}) || in[1] != "$(A)" {
		t.Errorf("no env: got %q (input %q)", got, in)
	}
}
