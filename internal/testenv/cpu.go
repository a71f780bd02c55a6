package testenv

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQLServerPID returns the pid of the test MariaDB server (ORCH_TEST_MYSQL_DSN) when it runs
// on this host, from its pid file; 0 when it does not, or the file cannot be read. Benchmarks use
// it with ProcessCPU to report what their statements cost the server, a figure far steadier
// than throughput on a shared machine.
func MySQLServerPID(tb testing.TB) int {
	tb.Helper()
	cfg, err := mysql.ParseDSN(MySQLServerDSN())
	if err != nil {
		return 0
	}
	server, err := openMySQL(cfg)
	if err != nil {
		return 0
	}
	defer func() { _ = server.Close() }() // a probe connection; nothing to flush
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	var file string
	if err := server.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&file); err != nil {
		return 0
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

// ProcessCPU is the user and system CPU time process pid has used so far, or -1 when
// /proc/<pid>/stat cannot be read (pid 0, another host, not Linux).
func ProcessCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The fields after the command, which may hold spaces, start after the last ')'.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// CPUMeter reads what the test MariaDB server (when it runs on this host) and this process
// spend in CPU over a benchmark's timed part, for its server_us/job and client_us/job.
type CPUMeter struct {
	serverPID        int
	server0, client0 time.Duration
}

// StartCPUMeter reads both processes' CPU time so far.
func StartCPUMeter(tb testing.TB) *CPUMeter {
	tb.Helper()
	pid := MySQLServerPID(tb)
	return &CPUMeter{serverPID: pid, server0: ProcessCPU(pid), client0: ProcessCPU(os.Getpid())}
}

// Report adds the CPU spent since StartCPUMeter per job: server_us/job when the server's CPU
// can be read here, and client_us/job.
func (m *CPUMeter) Report(b *testing.B, jobs float64) {
	if m.server0 >= 0 {
		b.ReportMetric((ProcessCPU(m.serverPID)-m.server0).Seconds()*1e6/jobs, "server_us/job")
	}
	b.ReportMetric((ProcessCPU(os.Getpid())-m.client0).Seconds()*1e6/jobs, "client_us/job")
}
