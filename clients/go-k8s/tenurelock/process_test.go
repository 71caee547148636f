package tenurelock_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/clients/go-k8s/internal/tenuretest"
)

// proc is a candidate process: this test binary run as candidateMain.
type proc struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{} // closed once its output is read and it exited

	mu   sync.Mutex
	term *interval // the term it leads, until it ends
}

// spawn starts candidate id against srv's election name; its terms go to
// led.
func spawn(t *testing.T, srv *tenuretest.Server, name, id string, led *ledger) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{id: id, exited: make(chan struct{})}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), candidateEnv+"="+id, "TENURELOCK_ADDR="+srv.Addr, "TENURELOCK_NAME="+name)
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) < 3 {
				continue
			}
			token, _ := strconv.ParseUint(f[1], 10, 64)
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			at := time.Unix(0, ns)
			switch f[0] {
			case "started":
				iv := led.begin(id, token, at)
				p.mu.Lock()
				p.term = iv
				p.mu.Unlock()
			case "ended":
				p.mu.Lock()
				if p.term != nil {
					led.finish(p.term, at, strings.Join(f[3:], " "))
				}
				p.mu.Unlock()
			}
		}
		err := p.cmd.Wait()
		// A process killed while leading led until it died.
		p.mu.Lock()
		if p.term != nil {
			led.finish(p.term, time.Now(), fmt.Sprintf("process ended (%v)", err))
		}
		p.mu.Unlock()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// signal sends sig and waits for the process to exit.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	within(t, p.exited, 10*time.Second, fmt.Sprintf("%s exits on %v", p.id, sig))
}

// TestElectionAcrossProcesses runs two, then three candidate processes
// (client-go's RunOrDie in each). The leader is killed with SIGKILL: another
// process takes over once Tenure expired the dead leader's term, about the
// TTL after its last renewal, with a greater token. Then the new leader is
// stopped with SIGTERM and releases its term: the next (the third process,
// or one started for the purpose) takes over at once. No two processes'
// terms overlap.
func TestElectionAcrossProcesses(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d-processes", n), func(t *testing.T) {
			srv := tenuretest.Start(t)
			client := srv.Client(t)
			name := electionName(t)
			led := newLedger(t, false)
			procs := map[string]*proc{}
			for i := range n {
				id := fmt.Sprintf("proc-%d", i+1)
				procs[id] = spawn(t, srv, name, id, led)
			}
			first := led.next(15 * time.Second)
			awaitRenewals(t, client, name, first.token, 2)

			// kill -9 the leader: no release, its term expires in Tenure.
			killed := time.Now()
			procs[first.id].signal(t, syscall.SIGKILL)
			delete(procs, first.id)
			second := led.next(3 * leaseDuration)
			took := second.start.Sub(killed)
			t.Logf("%s (token %d) killed; %s leads (token %d) %v later", first.id, first.token, second.id, second.token, took.Round(time.Millisecond))
			if second.id == first.id || second.token <= first.token {
				t.Fatalf("after %s (token %d) was killed, %s leads with token %d", first.id, first.token, second.id, second.token)
			}
			if took < leaseDuration-2*retryPeriod {
				t.Errorf("%s took over %v after the kill: before the dead leader's term could have expired", second.id, took)
			}

			if n == 2 {
				id := fmt.Sprintf("proc-%d", n+1)
				procs[id] = spawn(t, srv, name, id, led)
			}
			awaitRenewals(t, client, name, second.token, 2)

			// SIGTERM the new leader: it releases, the last candidate leads
			// at once.
			stopped := time.Now()
			procs[second.id].signal(t, syscall.SIGTERM)
			delete(procs, second.id)
			third := led.next(leaseDuration)
			t.Logf("%s (token %d) stopped; %s leads (token %d) %v later", second.id, second.token, third.id, third.token, third.start.Sub(stopped).Round(time.Millisecond))
			if third.token <= second.token {
				t.Fatalf("token %d after %d", third.token, second.token)
			}
			for _, p := range procs {
				p.signal(t, syscall.SIGTERM)
			}
			led.check()
		})
	}
}
