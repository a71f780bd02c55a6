package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// imageRepoPrefix names the images the image test builds: one repository per test process
// (the pid after it), removed at the end, so that the test neither replaces the image `make
// image` made nor races another test run on the same machine.
const imageRepoPrefix = "localhost/gpu-orchestrator-test-"

// imageUID is the user the image runs as (scripts/image-rootfs.sh).
const imageUID = "65532"

// buildah runs buildah with the vfs storage driver, as scripts/image.sh does.
func buildah(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "buildah", append([]string{"--storage-driver", "vfs"}, args...)...).CombinedOutput()
	require.NoError(t, err, "buildah %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// imageConfig is the part of an image's OCI configuration the test reads.
type imageConfig struct {
	User         string              `json:"User"`
	WorkingDir   string              `json:"WorkingDir"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Labels       map[string]string   `json:"Labels"`
}

// TestImage builds the image with `make image` (under a name of its own), checks its settings
// against the Dockerfile's, mounts it, and runs its binaries from its root filesystem as its
// user (chroot, with a /proc of their own): `orchestrator version`, `worker --help`, `orchctl
// --help`, and `orchestrator dev`, which must answer /readyz and run a job, on simulated GPUs
// since the image carries no NVML. It needs root and buildah (make services installs it).
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the image: not with -short")
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Skip("buildah is not installed (apt-get install buildah; make services installs it): the image is neither built nor run")
	}
	if os.Geteuid() != 0 {
		t.Skip("the image test needs root: buildah mounts the image's filesystem and chroot runs its binaries")
	}
	for _, tool := range []string{"make", "chroot", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the image is neither built nor run", tool)
		}
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	removeStaleTestImages(ctx, t)

	repo := imageRepoPrefix + strconv.Itoa(os.Getpid())
	start := time.Now()
	out, err := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", "..", "image", "IMAGE="+repo).CombinedOutput()
	require.NoError(t, err, "make image: %s", out)
	t.Logf("make image: %s\n%s", time.Since(start).Round(100*time.Millisecond), out)
	ref := imageName(t, "IMAGE="+repo)
	version := ref[strings.LastIndex(ref, ":")+1:]
	t.Cleanup(func() {
		_, _ = exec.Command("buildah", "--storage-driver", "vfs", "rmi", "--force", ref).CombinedOutput()
	})
	require.Regexp(t, `(?m)^image `+regexp.QuoteMeta(ref)+`$`, string(out))
	require.Regexp(t, `(?m)^id +[0-9a-f]{64}$`, string(out), "make image prints the image's id")
	require.Regexp(t, `(?m)^size +[0-9.]+ [kMG]B$`, string(out), "make image prints the image's size")

	var inspect struct {
		OCIv1 struct {
			Config imageConfig `json:"config"`
		} `json:"OCIv1"`
	}
	require.NoError(t, json.Unmarshal([]byte(buildah(ctx, t, "inspect", "--type", "image", ref)), &inspect))
	cfg := inspect.OCIv1.Config
	require.Equal(t, imageUID+":"+imageUID, cfg.User, "the image runs as a user, not root")
	require.Equal(t, version, cfg.Labels["org.opencontainers.image.version"])
	require.Equal(t, "https://github.com/gpuorch/orchestrator", cfg.Labels["org.opencontainers.image.source"])
	require.NotEmpty(t, cfg.Labels["org.opencontainers.image.revision"])
	requireDockerfileMatches(t, cfg)

	ctr := buildah(ctx, t, "from", "--pull-never", "--quiet", ref)
	t.Cleanup(func() { _, _ = exec.Command("buildah", "--storage-driver", "vfs", "rm", ctr).CombinedOutput() })
	root := buildah(ctx, t, "mount", ctr)

	nvml, err := filepath.Glob(filepath.Join(root, "*", "*", "libnvidia-ml*"))
	require.NoError(t, err)
	require.Empty(t, nvml, "NVML comes from the host's driver at run time, not from the image")
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	require.NoError(t, err)
	require.Contains(t, string(passwd), ":"+imageUID+":"+imageUID+":")

	t.Run("Binaries", func(t *testing.T) {
		out := inImage(ctx, t, root, cfg, nil, "orchestrator", "version")
		require.Equal(t, version, strings.TrimSpace(out))
		require.Contains(t, inImage(ctx, t, root, cfg, nil, "worker", "--help"), "-types")
		require.Contains(t, inImage(ctx, t, root, cfg, nil, "orchctl", "--help"), "pools")
	})
	t.Run("DevAnswersReadyz", func(t *testing.T) {
		devInImage(ctx, t, root, cfg)
	})
}

// imageName returns the name and tag `make image` commits, with vars (IMAGE=…) given to make.
func imageName(t *testing.T, vars ...string) string {
	t.Helper()
	args := append([]string{"-s", "--no-print-directory", "-C", "..", "image-name"}, vars...)
	out, err := exec.Command("make", args...).CombinedOutput()
	require.NoError(t, err, "make image-name: %s", out)
	return strings.TrimSpace(string(out))
}

// removeStaleTestImages removes the images earlier runs of this test left behind when they
// were killed: those whose process is gone.
func removeStaleTestImages(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, ref := range strings.Fields(buildah(ctx, t, "images", "--noheading", "--format", "{{.Name}}:{{.Tag}}")) {
		rest, ok := strings.CutPrefix(ref, imageRepoPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, ":")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		out, err := exec.CommandContext(ctx, "buildah", "--storage-driver", "vfs", "rmi", "--force", ref).CombinedOutput()
		t.Logf("removed %s, which a killed run left: %v %s", ref, err, out)
	}
}

// chrootCmd is argv run from the image's root filesystem as its user, with the image's
// environment plus env and nothing of the test's; unshare gives it a /proc of its own (the
// binaries read /proc/self/exe) that goes away with it.
func chrootCmd(ctx context.Context, root string, cfg imageConfig, env []string, argv ...string) *exec.Cmd {
	chroot, err := exec.LookPath("chroot") // by its path: the image's PATH does not have it
	if err != nil {
		chroot = "chroot"
	}
	args := append([]string{"--mount", "--mount-proc=" + filepath.Join(root, "proc"),
		chroot, "--userspec=" + cfg.User, root}, argv...)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = append(append([]string{}, cfg.Env...), env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// inImage runs one of the image's binaries to its end and returns its output; it must exit 0.
func inImage(ctx context.Context, t *testing.T, root string, cfg imageConfig, env []string, name string, args ...string) string {
	t.Helper()
	argv := append([]string{"/usr/local/bin/" + name}, args...)
	out, err := chrootCmd(ctx, root, cfg, env, argv...).CombinedOutput()
	require.NoError(t, err, "%s in the image: %s", strings.Join(argv, " "), out)
	return string(out)
}

// devInImage starts `orchestrator dev` from the image, waits for /readyz, runs one noop job
// through its in-process worker and stops it with SIGTERM, which must end it with status 0.
func devInImage(ctx context.Context, t *testing.T, root string, cfg imageConfig) {
	t.Helper()
	httpAddr, redisAddr := freeAddr(t), freeAddr(t)
	logs := &strings.Builder{}
	cmd := chrootCmd(ctx, root, cfg, []string{
		"ORCH_HTTP_ADDR=" + httpAddr, "ORCH_EMBEDDED_REDIS_ADDR=" + redisAddr,
		"ORCH_DATA_DIR=" + cfg.WorkingDir + "/data", // the working directory is the user's
	}, "/usr/local/bin/orchestrator", "dev")
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("orchestrator dev in the image:\n%s", logs)
		}
	}()

	base := "http://" + httpAddr
	hc := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			require.Contains(t, body, `"status":"ok"`)
			break
		}
		select {
		case <-exited:
			require.FailNow(t, "orchestrator dev exited before it was ready", "%v", waitErr)
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "/readyz did not answer 200 in time: %d %s", code, body)
	}
	code, body := get("/gpus")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"source":"simulated"`, "without NVML the image runs on simulated GPUs")

	resp, err := hc.Post(base+"/jobs/submit", "application/json",
		strings.NewReader(`{"job_id": "image-test-1", "type": "noop", "agent": "image-test", "payload": {}}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	for {
		_, body := get("/jobs/image-test-1")
		if strings.Contains(body, `"status":"done"`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the job did not finish in time: %s", body)
		time.Sleep(50 * time.Millisecond) // polling an HTTP API: nothing to wait on
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, waitErr, "orchestrator dev stops cleanly on SIGTERM")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "orchestrator dev did not stop within 30 s of SIGTERM")
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// requireDockerfileMatches checks that the Dockerfile's last stage gives its image the settings
// make image gave cfg: user, working directory, environment, ports, entrypoint and command,
// and the same labels.
func requireDockerfileMatches(t *testing.T, cfg imageConfig) {
	t.Helper()
	df := dockerfileLastStage(t, "../Dockerfile")
	require.Equal(t, cfg.User, df["USER"])
	require.Equal(t, cfg.WorkingDir, df["WORKDIR"])
	require.Equal(t, cfg.Entrypoint, jsonArray(t, df["ENTRYPOINT"]))
	require.Equal(t, cfg.Cmd, jsonArray(t, df["CMD"]))
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, strings.TrimSuffix(p, "/tcp"))
	}
	require.ElementsMatch(t, ports, strings.Fields(df["EXPOSE"]))
	require.ElementsMatch(t, cfg.Env, keyValues(df["ENV"]))
	var labels []string
	for _, kv := range keyValues(df["LABEL"]) {
		k, _, _ := strings.Cut(kv, "=")
		labels = append(labels, k)
	}
	for k := range cfg.Labels {
		if k != "io.buildah.version" && k != "org.opencontainers.image.created" {
			require.Contains(t, labels, k, "the Dockerfile sets label %s too", k)
		}
	}
	require.Contains(t, keyValues(df["LABEL"]), "org.opencontainers.image.source="+cfg.Labels["org.opencontainers.image.source"])
}

// dockerfileLastStage returns the instructions of a Dockerfile's last stage by name, their
// continuation lines joined (an instruction given twice keeps the last).
func dockerfileLastStage(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var stage map[string]string
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line == "" && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(text, `\`); ok {
			line += s + " "
			continue
		}
		line += text
		name, rest, _ := strings.Cut(line, " ")
		line = ""
		name = strings.ToUpper(name)
		if name == "FROM" {
			stage = map[string]string{}
		}
		if stage != nil {
			stage[name] = strings.TrimSpace(rest)
		}
	}
	require.NoError(t, sc.Err())
	require.NotNil(t, stage, "%s has a FROM", path)
	return stage
}

// keyValues splits `k=v k2="v 2"` (ENV, LABEL) into k=v strings, quotes removed.
func keyValues(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`([A-Za-z0-9_.-]+)=("[^"]*"|\S+)`).FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+"="+strings.Trim(m[2], `"`))
	}
	return out
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	require.NoError(t, json.Unmarshal([]byte(s), &out), "%q is a JSON array", s)
	return out
}
