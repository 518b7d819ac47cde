package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var binary string // the idem binary under test, built from the parent module

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-interop")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "idem")
	if out, err := exec.Command("go", "build", "-C", "..", "-o", binary, "./cmd/idem").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// stores are the --store values the suite runs on; IDEM_TEST_REDIS_URL
// and IDEM_TEST_DATABASE_URL override the local servers.
func stores() map[string]string {
	redis := cmp(os.Getenv("IDEM_TEST_REDIS_URL"), "redis://127.0.0.1:6379/0")
	pg := cmp(os.Getenv("IDEM_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	return map[string]string{"memory": "memory", "redis": redis, "postgres": pg}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// reachable skips the test when the store's server does not answer,
// unless CI is set: there a missing server is a failure.
func reachable(t *testing.T, store string) {
	if store == "memory" {
		return
	}
	u, err := url.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("store %s: %v", u.Redacted(), err)
		}
		t.Skipf("store %s not reachable: %v", u.Redacted(), err)
	}
	c.Close()
}

// startServe runs `idem serve` with args on free ports and returns its
// base URL; it is stopped with SIGTERM at the end of the test.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--admin", "", "--log-format", "json"}, args...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			mu.Lock()
			if logs.Len() < 1<<20 {
				logs.Write(line)
				logs.WriteByte('\n')
			}
			mu.Unlock()
			var ev struct{ Msg, Listen string }
			if json.Unmarshal(line, &ev) == nil && ev.Msg == "idem: serving" {
				ready <- ev.Listen
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case addr := <-ready:
		t.Cleanup(func() {
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				mu.Lock()
				t.Logf("idem serve logs (tail):\n%s", tail(logs.String(), 4000))
				mu.Unlock()
			}
		})
		return "http://" + addr
	case err := <-done:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("idem serve %v exited before serving: %v\n%s", args, err, logs.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("idem serve did not start in 60s")
	}
	return ""
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
