package redisstore

import (
	"regexp"
	"strings"
	"testing"
)

// TestWithRecordDefinesWhatItCalls checks every script's source: each
// function of record.lua that it calls is defined in it (a call of an
// undefined one fails in Redis only when its branch runs), and only the
// complete script's few are, so the trimming is not a no-op.
func TestWithRecordDefinesWhatItCalls(t *testing.T) {
	if len(recordFuncs) < 10 {
		t.Fatalf("record.lua split into %d functions, want all 15 or so", len(recordFuncs))
	}
	for _, s := range allScripts {
		for _, f := range recordFuncs {
			calls := regexp.MustCompile(`\b`+f.name+`\s*\(`).FindAllStringIndex(s.src, -1)
			defined := strings.Contains(s.src, "local function "+f.name+"(")
			if len(calls) > 0 && !defined {
				t.Errorf("%s calls %s, which its source does not define", s.name, f.name)
			}
		}
		if !strings.HasPrefix(s.src, recordHead) || !strings.HasSuffix(s.src, s.body) {
			t.Errorf("%s: its source is not record.lua's head, functions, then the script", s.name)
		}
	}
	for _, name := range []string{"pack_p", "pack_u", "reply", "to_unknown", "expired_reply"} {
		if strings.Contains(completeScript.src, "local function "+name+"(") {
			t.Errorf("complete.lua's source defines %s, which it never calls", name)
		}
	}
	if !strings.Contains(batchScript.src, "local function to_unknown(") {
		t.Error("the batch script lacks to_unknown, which acquire calls")
	}
}
