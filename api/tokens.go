package api

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
)

// Role is what a bearer token may do.
type Role string

// Roles. An agent submits and watches its own jobs; a worker claims and completes jobs; an
// approver lists the jobs held for approval and approves or rejects them; an admin may do
// everything.
const (
	RoleAgent    Role = "agent"
	RoleWorker   Role = "worker"
	RoleAdmin    Role = "admin"
	RoleApprover Role = "approver"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	return r == RoleAgent || r == RoleWorker || r == RoleAdmin || r == RoleApprover
}

// TokenPrefix starts every generated token, so a leaked one is easy to recognise (secret scanners).
const TokenPrefix = "orch_"

// TokensEnv is the environment variable holding token records separated by ";" (for containers,
// where mounting a file is awkward).
const TokensEnv = "ORCH_API_TOKENS"

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TokenRecord is one configured token: only its SHA-256 is kept, never the token itself.
type TokenRecord struct {
	// Hash is the lower-case hex SHA-256 of the token.
	Hash string
	Role Role
	// Agent is the agent the token speaks for (role agent only).
	Agent string
	// Types, when not nil, are the only job types a worker token may claim and register for
	// (types=a,b; role worker only). Nil: any type.
	Types []string
	// Pool, when set, is the only pool a worker token may claim and register in (pool=p; role
	// worker only); its claims and registrations must name it. Empty: any pool, or none.
	Pool string
	// Name is the person an approver token is (name=ann; role approver only, required): the
	// audit names its decisions "approver:<name>", and two keys are two names.
	Name string
}

// ID is the short, loggable id of the token: the first 8 hex digits of its hash.
func (r TokenRecord) ID() string { return r.Hash[:8] }

// Scoped reports whether the record limits a worker token to some types or a pool.
func (r TokenRecord) Scoped() bool { return r.Types != nil || r.Pool != "" }

// Line is the record in tokens-file form: "<sha256hex> <role> [key=value ...]", the keys
// agent= (role agent), types= and pool= (role worker).
func (r TokenRecord) Line() string {
	line := fmt.Sprintf("%s %s", r.Hash, r.Role)
	if r.Role == RoleAgent {
		line += " agent=" + r.Agent
	}
	if r.Role == RoleApprover {
		line += " name=" + r.Name
	}
	if r.Types != nil {
		line += " types=" + strings.Join(r.Types, ",")
	}
	if r.Pool != "" {
		line += " pool=" + r.Pool
	}
	return line
}

// Tokens is the set of configured tokens, by hash. The zero value and nil hold no token.
type Tokens struct {
	byHash map[string]TokenRecord
	// scoped says some worker token has a scope: only then do worker calls look their record
	// up again (Server.workerScope).
	scoped bool
}

// Len returns how many tokens are configured.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byHash)
}

// IDs returns the ids of the configured tokens (TokenRecord.ID), sorted.
func (t *Tokens) IDs() []string {
	if t == nil {
		return nil
	}
	ids := make([]string, 0, len(t.byHash))
	for _, rec := range t.byHash {
		ids = append(ids, rec.ID())
	}
	slices.Sort(ids)
	return ids
}

// Lookup returns the record of a presented token. The map lookup is by hash (which leaks nothing
// about the token); the final comparison is constant-time all the same.
func (t *Tokens) Lookup(token string) (TokenRecord, bool) {
	if t.Len() == 0 || token == "" {
		return TokenRecord{}, false
	}
	h := HashToken(token)
	rec, ok := t.byHash[h]
	if !ok || subtle.ConstantTimeCompare([]byte(rec.Hash), []byte(h)) != 1 {
		return TokenRecord{}, false
	}
	return rec, true
}

// HashToken returns the lower-case hex SHA-256 of a token, as stored in the tokens file.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// GenerateToken makes a new token for role (and agent, for role agent): "orch_" + 32 random bytes
// in base64url. line is its tokens-file record; the token itself is shown once and never stored.
func GenerateToken(role, agent string) (token, line string, err error) {
	return NewToken(TokenRecord{Role: Role(role), Agent: agent})
}

// NewToken makes a new token for rec (its Hash is ignored): the role, the agent of an agent
// token, the scope of a worker token. line is its tokens-file record.
func NewToken(rec TokenRecord) (token, line string, err error) {
	if err := rec.validate(); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	rec.Hash = HashToken(token)
	return token, rec.Line(), nil
}

// LoadTokens reads the tokens file at path (skipped when empty) and the records in env (the value
// of ORCH_API_TOKENS, records separated by ";"). A malformed record fails the whole load, naming
// its line (or its position in env). The same hash configured twice is an error, and so is a
// tokens file, or an env, that holds no record (only blank lines or comments): tokens were
// meant to be configured and none is, which would leave the server refusing everyone or, in
// dev mode, admitting loopback callers as admin without a token.
func LoadTokens(path, env string) (*Tokens, error) {
	t := &Tokens{byHash: map[string]TokenRecord{}}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("load tokens: %w", err)
		}
		defer func() { _ = f.Close() }() // read only: a close error loses nothing
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			if err := t.addLine(sc.Text()); err != nil {
				return nil, fmt.Errorf("load tokens: %s:%d: %w", path, n, err)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("load tokens: read %s: %w", path, err)
		}
		if t.Len() == 0 {
			return nil, fmt.Errorf("load tokens: the tokens file %s (tokens_file, ORCH_TOKENS_FILE) holds no token, "+
				"only blank lines or comments: add a token's line (`orchestrator token create`) or unset the setting", path)
		}
	}
	if env != "" {
		before := t.Len()
		for n, rec := range strings.Split(env, ";") {
			if err := t.addLine(rec); err != nil {
				return nil, fmt.Errorf("load tokens: %s record %d: %w", TokensEnv, n+1, err)
			}
		}
		if t.Len() == before {
			return nil, fmt.Errorf("load tokens: %s is set but holds no token record: add one "+
				"(`orchestrator token create`) or unset it", TokensEnv)
		}
	}
	return t, nil
}

// addLine parses one record; blank lines and # comments are skipped.
func (t *Tokens) addLine(line string) error {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}
	if len(fields) > 5 {
		return fmt.Errorf("want \"<sha256hex> <role> [agent=<name>] [types=<a,b>] [pool=<id>] [name=<approver>]\", got %d fields", len(fields))
	}
	rec := TokenRecord{Hash: strings.ToLower(fields[0])}
	if len(fields) > 1 {
		rec.Role = Role(fields[1])
	}
	seen := map[string]bool{}
	for _, f := range fields[min(2, len(fields)):] {
		key, value, ok := strings.Cut(f, "=")
		if !ok || seen[key] {
			return fmt.Errorf("field %q: want one each of agent=<name>, types=<a,b>, pool=<id>, name=<approver>", f)
		}
		seen[key] = true
		switch key {
		case "agent":
			rec.Agent = value
		case "types":
			rec.Types = strings.Split(value, ",")
		case "pool":
			if rec.Pool = value; value == "" {
				return errors.New("pool= needs a pool id")
			}
		case "name":
			rec.Name = value
		default:
			return fmt.Errorf("field %q: unknown key %q: want agent=, types=, pool= or name=", f, key)
		}
	}
	if !hashRE.MatchString(rec.Hash) {
		return errors.New("first field must be the 64 hex digits of the token's SHA-256 (not the token)")
	}
	if err := rec.validate(); err != nil {
		return err
	}
	if _, dup := t.byHash[rec.Hash]; dup {
		return fmt.Errorf("token %s is configured twice", rec.ID())
	}
	t.byHash[rec.Hash] = rec
	t.scoped = t.scoped || rec.Scoped()
	return nil
}

// validate checks the role and the agent binding (everything but the hash).
func (r TokenRecord) validate() error {
	switch {
	case r.Role == "":
		return errors.New("missing role: want agent, worker, admin or approver")
	case !r.Role.Valid():
		return fmt.Errorf("role %q: want agent, worker, admin or approver", r.Role)
	case r.Role == RoleApprover && r.Name == "":
		return errors.New("role approver needs name=<who>: the audit names each decision's approver")
	case r.Role == RoleApprover && !engine.AgentPattern.MatchString(r.Name):
		return fmt.Errorf("name %q: want %s", r.Name, engine.AgentPattern.Rule())
	case r.Role != RoleApprover && r.Name != "":
		return fmt.Errorf("name= is only for role approver, not %s", r.Role)
	case r.Role == RoleAgent && r.Agent == "":
		return errors.New("role agent needs agent=<name>")
	case r.Role == RoleAgent && !engine.AgentPattern.MatchString(r.Agent):
		return fmt.Errorf("agent %q: want %s", r.Agent, engine.AgentPattern.Rule())
	case r.Role != RoleAgent && r.Agent != "":
		return fmt.Errorf("agent= is only for role agent, not %s", r.Role)
	case r.Role != RoleWorker && r.Scoped():
		return fmt.Errorf("types= and pool= are only for role worker, not %s", r.Role)
	case r.Types != nil && len(r.Types) == 0:
		return errors.New("types= needs at least one job type")
	case r.Pool != "" && !ident.ID.MatchString(r.Pool):
		return fmt.Errorf("pool %q: want %s", r.Pool, ident.ID.Rule())
	}
	seen := make(map[string]bool, len(r.Types))
	for _, typ := range r.Types {
		if !typeNameRE.MatchString(typ) {
			return fmt.Errorf("types: %q is not a job type name (lower case letters, digits and _)", typ)
		}
		if seen[typ] {
			return fmt.Errorf("types: %q is listed twice", typ)
		}
		seen[typ] = true
	}
	return nil
}

// typeNameRE is the form of a job type name (config's rule).
var typeNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// inScope reports whether a scope of types (nil: any) allows typ.
func inScope(types []string, typ string) bool {
	return types == nil || slices.Contains(types, typ)
}
