// Command orchestrator is the API and engine process: `orchestrator serve | migrate | dev |
// token | version`.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	root := &cobra.Command{
		Use:           "orchestrator",
		Short:         "GPU Orchestrator: durable, lease-guarded job delivery to GPU worker pools",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "YAML configuration file (default: $ORCH_CONFIG)")
	root.AddCommand(serveCmd(), migrateCmd(), devCmd(), tokenCmd(), versionCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

// loadConfig reads the configuration named by --config or ORCH_CONFIG, with env overrides.
func loadConfig(cmd *cobra.Command) (*config.Config, error) {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = os.Getenv("ORCH_CONFIG")
	}
	return config.Load(path, os.Getenv)
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), versionString()) },
	}
}
