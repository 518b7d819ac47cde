package counts

import "testing"

func TestParse(t *testing.T) {
	got, err := Parse("1, 2,4", 0)
	if err != nil || len(got) != 3 || got[2] != 4 {
		t.Errorf("Parse = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,,2", "-1", "x"} {
		if _, err := Parse(bad, 0); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
	if _, err := Parse("1,0", 1); err == nil {
		t.Error("Parse(\"1,0\", 1): no error")
	}
}
