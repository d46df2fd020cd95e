package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// totalMemory, by sysinfo(2), is /proc/meminfo's MemTotal.
func TestTotalMemoryIsMemTotal(t *testing.T) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := totalMemory(); got != kib<<10 {
				t.Fatalf("totalMemory() = %d, MemTotal is %d", got, kib<<10)
			}
			return
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
}
