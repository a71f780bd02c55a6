package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/logging"
)

func migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "migrate up|down|version",
		Short:     "Apply, revert or show the MariaDB schema migrations",
		Long:      "up applies every pending migration (creating the database when missing), down reverts all of them (destroys the data), version prints the applied version.",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"up", "down", "version"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "up", "down", "version":
			default:
				return fmt.Errorf("migrate: unknown direction %q: want up, down or version", args[0])
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := logging.New(os.Stderr, cfg.LogLevel, "text")
			ctx := cmd.Context()
			if args[0] == "up" {
				if err := db.EnsureDatabase(ctx, cfg.MySQLDSN); err != nil {
					return err
				}
			}
			v, dirty, err := db.MigrateMySQL(ctx, cfg.MySQLDSN, args[0], log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "version %d (latest %d), dirty=%t\n", v, db.LatestMySQLVersion(), dirty)
			return nil
		},
	}
}
