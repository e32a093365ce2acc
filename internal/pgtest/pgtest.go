// Package pgtest starts a throwaway PostgreSQL cluster for tests: initdb and pg_ctl a cluster in
// a temporary folder, listening on a free 127.0.0.1 port (and on a unix socket in that folder
// only), with fsync off, and stopped and removed when the tests end. One cluster serves a test
// package (started on first use, stopped by Main from its TestMain); each test gets a database of
// its own (DB), created from a template the package may prepare once (Options.Prepare), so tests
// do not see each other.
//
// The binaries: initdb and pg_ctl on PATH, else the newest /usr/lib/postgresql/N/bin (Debian's
// postgresql-15 package), or the folder in DCC_FLOW_PG_BIN. initdb refuses to run as root, so
// when the test process is root the cluster runs as the OS user "postgres" (runuser), which owns
// the temporary folder. Without initdb the tests that need a database are skipped with a loud
// message, except under CI=true on Linux, where they fail: CI must test the PostgreSQL store
// (.ci/run installs postgresql). On Windows (the cross-built tests run under Wine) they skip.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running throwaway cluster. Stop it when done.
type Cluster struct {
	dir     string // the temporary folder: data/, sock/, log
	bin     string // the folder of initdb and pg_ctl
	port    int
	asUser  string // "postgres" when the process is root, else ""
	n       atomic.Int64
	stopped sync.Once
}

// Superuser is the role the cluster is created with (initdb -U).
const Superuser = "postgres"

// templateDB is the database each DB is copied from.
const templateDB = "dcc_template"

// ErrNoPostgres is returned by Start when no initdb is installed.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL server binaries (initdb, pg_ctl) found: install Debian's postgresql-15 " +
	"(apt-get install -y postgresql-15), put its bin folder on PATH, or set DCC_FLOW_PG_BIN")

// findBin returns the folder holding initdb and pg_ctl.
func findBin() (string, error) {
	if runtime.GOOS == "windows" {
		// The tests cross-built for Windows run under Wine, beside Linux binaries they cannot start.
		return "", fmt.Errorf("%w (the throwaway cluster is started on Linux and macOS only)", ErrNoPostgres)
	}
	if d := os.Getenv("DCC_FLOW_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("pgtest: DCC_FLOW_PG_BIN=%s has no initdb: %w", d, err)
		}
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				p = real // /usr/local/bin may link initdb and pg_ctl only
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// freePort returns a 127.0.0.1 port nobody listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start initialises and starts a cluster. It returns ErrNoPostgres when no initdb is installed.
func Start(ctx context.Context) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dcc-flow-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root, and initdb refuses root: need the OS user postgres "+
				"(Debian's postgresql package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.asUser = "postgres"
	}
	for _, sub := range []string{"sock"} {
		if err := c.run(ctx, "mkdir", filepath.Join(dir, sub)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if err := c.run(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A port free now may be taken before the server binds it: try a few.
	for attempt := 0; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err = c.StartServer(ctx); err == nil {
			break
		}
		if attempt == 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w; server log:\n%s", err, log)
		}
	}
	c.startReaper()
	if err := c.exec(ctx, "postgres", "CREATE DATABASE "+templateDB); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startReaper starts a shell of its own (its own process group, so that a signal to the test's
// group does not reach it) that waits for the test process to end and then stops the server
// (SIGQUIT to the postmaster: an immediate shutdown) and removes its folder: a test process
// that is killed (a crash test's child, a go test timeout) leaves no server running. After a
// normal Stop it finds nothing left to do.
func (c *Cluster) startReaper() {
	script := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 1; done
pid=$(head -n 1 %q/data/postmaster.pid 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null && sleep 2
rm -rf %q`, os.Getpid(), c.dir, c.dir)
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = reaperAttr()
	if err := cmd.Start(); err == nil {
		_ = cmd.Process.Release() // it outlives this process: nobody here waits for it
	}
}

// run runs a command, as the postgres user when the process is root.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	if c.asUser != "" {
		args = append([]string{"-u", c.asUser, "--", name}, args...)
		name = "runuser"
	}
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// URL returns the connection string of database db.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgresql://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, c.port, db)
}

// Dir returns the cluster's temporary folder.
func (c *Cluster) Dir() string { return c.dir }

// Port returns the port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

func (c *Cluster) exec(ctx context.Context, db, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		return fmt.Errorf("pgtest: connecting to %s: %w", c.URL(db), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgtest: %s: %w", sql, err)
	}
	return nil
}

// Prepare runs fn on the template database, before any NewDatabase: e.g. migrate it, so that
// each test's database starts migrated.
func (c *Cluster) Prepare(ctx context.Context, fn func(url string) error) error {
	return fn(c.URL(templateDB))
}

// NewDatabase creates a new database from the template and returns its URL.
func (c *Cluster) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d", c.n.Add(1))
	if err := c.exec(ctx, "postgres", "CREATE DATABASE "+name+" TEMPLATE "+templateDB); err != nil {
		return "", err
	}
	return c.URL(name), nil
}

// serverOptions are the pg_ctl -o options of the server.
func (c *Cluster) serverOptions() string {
	return fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "+
		"-c max_connections=300 -c shared_buffers=64MB", c.port, filepath.Join(c.dir, "sock"))
}

// StopServer stops the server (fast: open connections are cut), keeping its data, for tests
// of an unreachable database; StartServer starts it again on the same port.
func (c *Cluster) StopServer(ctx context.Context) error {
	return c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop")
}

// StartServer starts the server stopped by StopServer.
func (c *Cluster) StartServer(ctx context.Context) error {
	return c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "log"),
		"-w", "-t", "60", "-o", c.serverOptions(), "start")
}

// Restart stops the server and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.StopServer(ctx); err != nil {
		return err
	}
	return c.StartServer(ctx)
}

// Stop stops the server and removes its folder. Stopping twice is not an error.
func (c *Cluster) Stop() {
	c.stopped.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
		os.RemoveAll(c.dir)
	})
}

// The package's cluster, started by the first Shared (or DB) of its tests and stopped by Main.
var (
	sharedOnce sync.Once
	sharedOpts *Options // set by Main; nil: Main was not called
	shared     *Cluster
	sharedErr  error // why there is none
)

// Options configure Main.
type Options struct {
	// Prepare, when set, runs once on the template database (e.g. migrates it).
	Prepare func(url string) error
}

// Main runs the tests of a package whose tests use the package's cluster (Shared, DB), and
// stops that cluster after them; call it from TestMain: os.Exit(pgtest.Main(m,
// pgtest.Options{})). The cluster starts when a test first asks for it, so a run of tests that
// need none (go test -run X) costs nothing. Without initdb those tests skip loudly, except under
// CI=true on Linux, where they fail.
func Main(m *testing.M, o Options) int { return MainFunc(m.Run, o) }

// MainFunc is Main around run, for a TestMain that wraps m.Run (e.g. in leakcheck.Main).
func MainFunc(run func() int, o Options) int {
	sharedOpts = &o
	code := run()
	if shared != nil {
		shared.Stop()
	}
	if sharedErr != nil && errors.Is(sharedErr, ErrNoPostgres) && !mustHave() {
		fmt.Fprintf(os.Stderr, "\n!!! The PostgreSQL tests of this package were SKIPPED: %v !!!\n\n", sharedErr)
	}
	return code
}

// mustHave reports whether a missing initdb fails the tests rather than skipping them: under
// CI=true on Linux, where .ci/run installs postgresql.
func mustHave() bool { return os.Getenv("CI") == "true" && runtime.GOOS == "linux" }

// Shared returns the package's cluster, starting it on first use (see Main). Without initdb it
// skips t (loudly), or fails it under CI=true on Linux; any other failure to start fails t.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if sharedOpts == nil {
		t.Fatal("pgtest: no cluster: call pgtest.Main from TestMain")
	}
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx)
		if sharedErr == nil && sharedOpts.Prepare != nil {
			if err := shared.Prepare(ctx, sharedOpts.Prepare); err != nil {
				shared.Stop()
				shared, sharedErr = nil, fmt.Errorf("pgtest: preparing the template database: %w", err)
			}
		}
	})
	if shared == nil {
		if mustHave() || !errors.Is(sharedErr, ErrNoPostgres) {
			t.Fatalf("no PostgreSQL test cluster: %v", sharedErr)
		}
		t.Skipf("!!! PostgreSQL not available, test skipped: %v", sharedErr)
	}
	return shared
}

// DB returns the URL of a new database of the package's cluster, for t alone.
func DB(t testing.TB) string {
	t.Helper()
	c := Shared(t)
	url, err := c.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// StartT starts a cluster of t's own, stopped and removed by t.Cleanup (for a test that
// restarts or breaks its server). It skips t without initdb, or fails it under CI=true.
func StartT(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx)
	if err != nil {
		if errors.Is(err, ErrNoPostgres) && !mustHave() {
			t.Skipf("!!! PostgreSQL not available, test skipped: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}
