package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newWebhooksCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "webhooks",
		Short: "Subscribe endpoints to the cluster's events; list, delete and follow their deliveries",
		Long: `Subscribe HTTP endpoints to the cluster's events (admin): job.submitted, job.started, job.done,
job.failed (an attempt failed and will be retried), job.dead_letter, job.cancelled,
job.replayed, schedule.fired, schedule.skipped and webhook.disabled.

Every event is POSTed as JSON {id, type, created_at, data}, at least once, with the same
Idempotency-Key on every attempt, signed: X-Orchestrator-Signature: t=<unix>,v1=<hex
HMAC-SHA256 of "<t>.<body>"> with the secret "webhooks create" prints once (docs/security.md
shows how to verify it). A failed attempt is retried with capped exponential backoff; an
endpoint that fails webhooks.max_consecutive_failures times in a row is disabled (and
"webhooks enable" turns it back on).`,
	}, newWebhooksListCmd(g), newWebhooksCreateCmd(g), newWebhooksDeleteCmd(g), newWebhooksEnableCmd(g, true),
		newWebhooksEnableCmd(g, false), newWebhooksDeliveriesCmd(g), newWebhooksCallbackSecretCmd(g))
}

func newWebhooksListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the subscriptions: URL, events, filter, status, failures, pending deliveries",
		Long: `List every webhook subscription (GET /webhooks, admin): its id, status (active or disabled),
failed attempts in a row, pending deliveries, events, filter and URL. Secrets are never shown
again after "webhooks create". With -o json the one document is {"webhooks": [...]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListWebhooks(cmd.Context())
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), list)
			case len(list.Webhooks) == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), `no webhook subscriptions: "orchctl webhooks create --url URL --events job.done" adds one`)
				return nil
			}
			return printWebhooks(cmd, list.Webhooks)
		},
	}
}

// printWebhooks prints one row per subscription.
func printWebhooks(cmd *cobra.Command, hooks []client.Webhook) error {
	t := newTable(cmd.OutOrStdout(), "ID", "STATUS", "FAILURES", "PENDING", "EVENTS", "FILTER", "URL")
	for _, h := range hooks {
		t.row(h.ID, h.Status, strconv.Itoa(h.ConsecutiveFailures), strconv.Itoa(h.PendingDeliveries),
			strings.Join(h.Events, ","), orDash(filterString(h.Filter)), h.URL)
	}
	return t.flush()
}

// filterString is "type=a,agent=b".
func filterString(f *client.WebhookFilter) string {
	if f == nil {
		return ""
	}
	var parts []string
	if f.Type != "" {
		parts = append(parts, "type="+f.Type)
	}
	if f.Agent != "" {
		parts = append(parts, "agent="+f.Agent)
	}
	return strings.Join(parts, ",")
}

// webhooksCreateFlags are the flags of "webhooks create".
type webhooksCreateFlags struct {
	url, typ, agent string
	events          []string
}

func newWebhooksCreateCmd(g *globals) *cobra.Command {
	var f webhooksCreateFlags
	cmd := &cobra.Command{
		Use:   "create --url URL --events EVENT[,EVENT…] [--type TYPE] [--agent AGENT]",
		Short: "Subscribe an endpoint; prints its signing secret, once",
		Long: `Subscribe an endpoint to events (POST /webhooks, admin) and print its id and signing secret,
which is shown this once: keep it where the receiver can read it. --type and --agent keep only
the events of jobs of that type and agent. The URL must be http(s) and reach no loopback,
private, link-local or unspecified address (unless the cluster sets webhooks.allow_private).
With -o json the one document is the subscription with its secret.`,
		Example: `  orchctl webhooks create --url https://hooks.example.com/orchestrator --events job.done,job.dead_letter
  orchctl webhooks create --url https://billing.example.com/h --events job.done --agent acme`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runWithFlags(func(cmd *cobra.Command, f *webhooksCreateFlags) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			req := client.WebhookRequest{URL: f.url, Events: f.events}
			if f.typ != "" || f.agent != "" {
				req.Filter = &client.WebhookFilter{Type: f.typ, Agent: f.agent}
			}
			h, err := c.CreateWebhook(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), h)
			}
			if err := printWebhooks(cmd, []client.Webhook{h}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nsecret: %s\n(shown once: the receiver verifies every request's "+
				"X-Orchestrator-Signature with it)\n", h.Secret)
			return nil
		}, &f),
	}
	cmd.Flags().StringVar(&f.url, "url", "", "the endpoint (required)")
	cmd.Flags().StringSliceVar(&f.events, "events", nil, "the events to receive, comma separated (required)")
	cmd.Flags().StringVar(&f.typ, "type", "", "only the events of jobs of this type")
	cmd.Flags().StringVar(&f.agent, "agent", "", "only the events of this agent's jobs")
	_ = cmd.MarkFlagRequired("url")
	_ = cmd.MarkFlagRequired("events")
	_ = cmd.RegisterFlagCompletionFunc("events", cobra.FixedCompletions(webhookEvents, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// webhookEvents are the events a subscription may name, for completion.
var webhookEvents = []string{"job.submitted", "job.started", "job.done", "job.failed", "job.dead_letter", "job.cancelled",
	"job.replayed", "schedule.fired", "schedule.skipped", "webhook.disabled"}

func newWebhooksDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Unsubscribe an endpoint; its deliveries, pending or not, go with it",
		Long: `Delete a webhook subscription (DELETE /webhooks/{id}, admin): nothing more is queued for it
or sent to it, and its deliveries and their attempts are deleted, pending ones included.
Audited webhook.deleted. Exit code 0 when it is gone, 2 when the API refused (404: no such
subscription).`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, webhookIDs),
		RunE:              onDelete(g, "webhook", (*client.Client).DeleteWebhook),
	}
}

func newWebhooksEnableCmd(g *globals, enable bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "enable ID",
		Short: "Enable a disabled subscription again, its failures forgotten",
		Long: `Enable a webhook subscription (POST /webhooks/{id}/enable, admin), after the leader disabled
it for its failures or an admin did: its pending deliveries go as they were due (the events of
the time it was disabled were not queued for it). Audited webhook.enabled. Exit code 0 when it
is active, 2 when the API refused.`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, webhookIDs),
	}
	if !enable {
		cmd.Use, cmd.Short = "disable ID", "Disable a subscription: nothing is queued for it or sent to it"
		cmd.Long = `Disable a webhook subscription (POST /webhooks/{id}/disable, admin): no event is queued for it
and nothing is sent to it until it is enabled again; its pending deliveries wait. Audited
webhook.disabled, which is itself an event for the subscriptions that ask for it. Exit code 0
when it is disabled, 2 when the API refused.`
	}
	set := func(c *client.Client, ctx context.Context, id string) (client.Webhook, error) {
		return c.SetWebhookEnabled(ctx, id, enable)
	}
	cmd.RunE = onID(g, set, func(cmd *cobra.Command, h client.Webhook) error { return printWebhooks(cmd, []client.Webhook{h}) })
	return cmd
}

// webhooksDeliveriesFlags are the flags of "webhooks deliveries".
type webhooksDeliveriesFlags struct {
	limit  int
	cursor string
}

func newWebhooksDeliveriesCmd(g *globals) *cobra.Command {
	var f webhooksDeliveriesFlags
	cmd := &cobra.Command{
		Use:   "deliveries ID [--limit N] [--cursor C]",
		Short: "A subscription's deliveries, newest first, with every attempt",
		Long: `List a subscription's deliveries (GET /webhooks/{id}/deliveries, admin), newest first: the
event, its job, the status (pending, delivered, or failed: given up after webhooks.max_attempts),
the attempts so far and the last one's HTTP status and error, then each attempt. A page holds
--limit deliveries; the next page's cursor is printed last (--cursor). With -o json the one
document is {"deliveries": [...], "next_cursor"}.`,
		Example: `  orchctl webhooks deliveries wh_4f1c0e2a9b7d3c5e8f6a1b2c --limit 20`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListWebhookDeliveries(cmd.Context(), args[0], f.cursor, f.limit)
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), page)
			case len(page.Deliveries) == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), "no deliveries")
				return nil
			}
			return g.printDeliveries(cmd, page)
		},
		ValidArgsFunction: completeFromAPI(g, 1, webhookIDs),
	}
	cmd.Flags().IntVar(&f.limit, "limit", 0, "deliveries per page (1..500; the server's default is 50)")
	cmd.Flags().StringVar(&f.cursor, "cursor", "", "the next page's cursor, as the previous page printed it")
	return cmd
}

// printDeliveries prints a page of deliveries and their attempts.
func (g *globals) printDeliveries(cmd *cobra.Command, page client.WebhookDeliveryList) error {
	now, out := g.now(), cmd.OutOrStdout()
	t := newTable(out, "DELIVERY", "EVENT", "TYPE", "JOB", "STATUS", "ATTEMPTS", "LAST", "NEXT", "CREATED")
	for _, d := range page.Deliveries {
		last := "-"
		if d.Attempts > 0 {
			last = orDash(truncate(oneLine(lastAttempt(d)), 60))
		}
		t.row(strconv.FormatInt(d.ID, 10), d.EventID, d.EventType, orDash(d.JobID), d.Status, strconv.Itoa(d.Attempts), last,
			fmtRelativePtr(d.NextAttemptAt, now), fmtRelative(d.CreatedAt, now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	t = newTable(out, "DELIVERY", "ATTEMPT", "STATUS CODE", "ERROR", "STARTED", "TOOK")
	for _, d := range page.Deliveries {
		for _, a := range d.History {
			t.row(strconv.FormatInt(d.ID, 10), strconv.Itoa(a.Attempt), orDash(codeString(a.StatusCode)),
				orDash(truncate(oneLine(a.Error), 80)), fmtRelative(a.StartedAt, now), fmt.Sprintf("%.1fms", a.DurationMS))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(out, "\nnext page: --cursor %s\n", page.NextCursor)
	}
	return nil
}

// lastAttempt says how a delivery's last attempt went.
func lastAttempt(d client.WebhookDelivery) string {
	if d.LastError != "" {
		return d.LastError
	}
	return codeString(d.LastStatusCode)
}

// codeString is an HTTP status, "" for none.
func codeString(code int) string {
	if code == 0 {
		return ""
	}
	return strconv.Itoa(code)
}

func newWebhooksCallbackSecretCmd(g *globals) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "callback-secret [--agent AGENT]",
		Short: "The key an agent's job callbacks (callback_url) are signed with",
		Long: `Print the key an agent's job callbacks are signed with (GET /webhooks/callback_secret): a
job submitted with callback_url gets its terminal event (job.done, job.dead_letter,
job.cancelled) POSTed there, signed as a subscription's deliveries are, with this key. An agent
token gets its own agent's; an admin names the agent with --agent. The cluster derives each
agent's key from webhooks.callback_secret. With -o json the one document is {"agent", "secret"}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.GetCallbackSecret(cmd.Context(), agent)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), s)
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.Secret)
			return nil
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent (an admin token); an agent token's own otherwise")
	return cmd
}

// webhookIDs lists the subscriptions' ids for completion.
func webhookIDs(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error) {
	c, err := g.client(cmd)
	if err != nil {
		return nil, err
	}
	list, err := c.ListWebhooks(ctx)
	return idsOf(list.Webhooks, func(h client.Webhook) string { return h.ID }), err
}
