package transport

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// faultPair returns two wrapped layers on ipA and ipB, each with its own Faults.
func faultPair(t *testing.T) (a, b raft.StreamLayer, fa, fb *Faults) {
	t.Helper()
	fa, fb = new(Faults), new(Faults)
	return WrapStreamLayer(newLayer(t, ipA), fa), WrapStreamLayer(newLayer(t, ipB), fb), fa, fb
}

// connect dials from a to b and returns both ends.
func connect(t *testing.T, a, b raft.StreamLayer) (dialed, accepted net.Conn) {
	t.Helper()
	ch := acceptOne(t, b)
	dialed = dial(t, a, b.Addr())
	return dialed, waitConn(t, ch)
}

// readErr reads from c with a bound and returns the error, failing the test
// if data arrives or nothing happens.
func readErr(t *testing.T, c net.Conn) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 16))
	if n > 0 {
		t.Fatalf("read %d bytes from a cut connection", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("read on a cut connection timed out instead of failing")
	}
	return err
}

func TestBlockCutsOpenConnectionsBothWays(t *testing.T) {
	a, b, _, fb := faultPair(t)
	outA, inB := connect(t, a, b) // A dialed B
	outB, inA := connect(t, b, a) // B dialed A
	roundTrip(t, outA, inB, "x")
	roundTrip(t, outB, inA, "y")

	// B blocks A by its Raft address; B's side matches the accepted
	// connection by A's IP and the dialed one by address.
	fb.Block(a.Addr().String())

	if err := readErr(t, inB); !errors.Is(err, ErrBlocked) {
		t.Errorf("B reading accepted conn from A: %v, want ErrBlocked", err)
	}
	if _, err := outB.Write([]byte("z")); !errors.Is(err, ErrBlocked) {
		t.Errorf("B writing dialed conn to A: %v, want ErrBlocked", err)
	}
	// A's Faults has no fault, but B closed both connections.
	if err := readErr(t, outA); err != io.EOF {
		t.Errorf("A reading conn it dialed to B: %v, want EOF", err)
	}
	if err := readErr(t, inA); err != io.EOF {
		t.Errorf("A reading conn accepted from B: %v, want EOF", err)
	}
}

func TestBlockedPeerCannotConnect(t *testing.T) {
	a, b, _, fb := faultPair(t)
	fb.Block(a.Addr().String())

	if _, err := b.Dial(raft.ServerAddress(a.Addr().String()), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("B dialing blocked A: %v, want ErrBlocked", err)
	}

	// A's dial completes at the TCP level, B closes the connection on
	// accept and goes on accepting: the next connection, from a peer that
	// is not blocked, comes out of Accept.
	ch := acceptOne(t, b)
	fromA := dial(t, a, b.Addr())
	if err := readErr(t, fromA); err != io.EOF {
		t.Fatalf("A reading conn to B that blocks it: %v, want EOF", err)
	}
	c := newLayer(t, ipC)
	fromC := dial(t, c, b.Addr())
	inB := waitConn(t, ch)
	if got := remoteIP(inB); got != ipC {
		t.Fatalf("Accept returned connection from %s, want %s", got, ipC)
	}
	roundTrip(t, fromC, inB, "hello")

	fb.Unblock(a.Addr().String())
	outA, inB2 := connect(t, a, b)
	roundTrip(t, outA, inB2, "again")
}

func TestBlockAllAndHeal(t *testing.T) {
	a, b, fa, _ := faultPair(t)
	outA, inB := connect(t, a, b)
	fa.BlockAll()

	if _, err := outA.Write([]byte("x")); !errors.Is(err, ErrBlocked) {
		t.Fatalf("write after BlockAll: %v, want ErrBlocked", err)
	}
	if err := readErr(t, inB); err != io.EOF {
		t.Fatalf("peer read after BlockAll: %v, want EOF", err)
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("dial after BlockAll: %v, want ErrBlocked", err)
	}
	// Unblock does not lift BlockAll.
	fa.Unblock(b.Addr().String())
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("dial after BlockAll and Unblock: %v, want ErrBlocked", err)
	}

	fa.Heal()
	outA, inB = connect(t, a, b)
	roundTrip(t, outA, inB, "healed")
}

func TestDelay(t *testing.T) {
	a, b, fa, _ := faultPair(t)
	outA, inB := connect(t, a, b)
	const d = 50 * time.Millisecond
	fa.SetDelay(d)
	start := time.Now()
	roundTrip(t, outA, inB, "slow")
	if took := time.Since(start); took < d {
		t.Fatalf("delayed write arrived after %v, want at least %v", took, d)
	}

	// Closing a connection ends a write waiting out its delay.
	fa.SetDelay(time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := outA.Write([]byte("never"))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	outA.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("delayed write on closed conn: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delayed write did not end on Close")
	}

	fa.Heal()
	outA, inB = connect(t, a, b)
	roundTrip(t, outA, inB, "fast")
}

func TestDropRate(t *testing.T) {
	a, b, fa, _ := faultPair(t)
	fa.SetRand(func() float64 { return 0.5 })
	outA, inB := connect(t, a, b)

	fa.SetDropRate(0.4) // 0.5 >= 0.4: kept
	roundTrip(t, outA, inB, "kept")

	fa.SetDropRate(0.6) // 0.5 < 0.6: dropped
	if _, err := outA.Write([]byte("lost")); !errors.Is(err, ErrDropped) {
		t.Fatalf("write: %v, want ErrDropped", err)
	}
	if err := readErr(t, inB); err != io.EOF {
		t.Fatalf("peer read after a drop: %v, want EOF", err)
	}

	// A seeded source gives a reproducible share of drops.
	fa.SetRand(rand.New(rand.NewPCG(1, 2)).Float64)
	fa.SetDropRate(0.3)
	drops := 0
	const n = 1000
	for range n {
		if _, drop := fa.beforeWrite(); drop {
			drops++
		}
	}
	if drops < 200 || drops > 400 {
		t.Fatalf("%d drops in %d writes at rate 0.3", drops, n)
	}

	fa.SetDropRate(2) // clamped to 1
	if _, drop := fa.beforeWrite(); !drop {
		t.Fatal("rate above 1 did not drop")
	}
	fa.Heal()
	if _, drop := fa.beforeWrite(); drop {
		t.Fatal("dropped after Heal")
	}
}

func TestCutToIsOneWay(t *testing.T) {
	a, b, fa, _ := faultPair(t)
	outA, inB := connect(t, a, b) // A dialed B
	outB, inA := connect(t, b, a) // B dialed A
	roundTrip(t, outA, inB, "x")
	roundTrip(t, outB, inA, "y")

	// What A sends to B is lost from now on.
	fa.CutTo(b.Addr().String())

	// A's own connection to B is closed, and A cannot dial B again.
	if err := readErr(t, inB); err != io.EOF {
		t.Errorf("B reading the conn A dialed: %v, want EOF", err)
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrBlocked) {
		t.Errorf("A dialing B across the cut: %v, want ErrBlocked", err)
	}
	// B still reaches A: on B's connection, and on a new one.
	roundTrip(t, outB, inA, "still heard")
	outB2, inA2 := connect(t, b, a)
	roundTrip(t, outB2, inA2, "new conn heard")
	// A's answers are swallowed: A's write succeeds, B reads nothing.
	if n, err := inA.Write([]byte("answer")); err != nil || n != len("answer") {
		t.Fatalf("A writing to B across the cut: %d, %v; want a silent success", n, err)
	}
	outB.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := outB.Read(make([]byte, 16)); n > 0 || !isTimeout(err) {
		t.Fatalf("B read %d bytes (%v) across a cut; want a timeout", n, err)
	}
	// A cut does not affect other peers.
	c := newLayer(t, ipC)
	outC, inC := connect(t, a, c)
	roundTrip(t, outC, inC, "to C")

	// Unblock lifts the cut, and closes the connection whose answer was
	// lost (its stream is broken: B would wait for its read deadline).
	fa.Unblock(b.Addr().String())
	outB.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := outB.Read(make([]byte, 16)); err != io.EOF {
		t.Errorf("B reading the connection that lost A's answer after the cut: %v, want EOF", err)
	}
	outA, inB = connect(t, a, b)
	roundTrip(t, outA, inB, "healed")
	roundTrip(t, inA2, outB2, "answer heard")
}

func TestHealLiftsCut(t *testing.T) {
	a, b, fa, _ := faultPair(t)
	fa.CutTo(b.Addr().String())
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("dial across a cut: %v, want ErrBlocked", err)
	}
	fa.Heal()
	outA, inB := connect(t, a, b)
	roundTrip(t, outA, inB, "healed")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
