package api

import (
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// AuthOptions configure bearer-token authentication.
type AuthOptions struct {
	// Tokens are the accepted tokens (LoadTokens). Nil or empty: no token is configured.
	Tokens *Tokens
	// AllowUnauthenticatedLoopback is for dev mode: when no token is configured, requests from a
	// loopback address, for a loopback Host, are treated as admin (tokenless mode, see
	// guardRequests for what else it refuses). The caller must listen on loopback only and
	// should log loudly that it is on. Without it, and with no token configured, every
	// authenticated route answers 401.
	AllowUnauthenticatedLoopback bool
}

// Identity is who a request speaks for, as its token says.
type Identity struct {
	Role Role
	// Agent is the agent of an agent token.
	Agent string
	// Name is the person of an approver token.
	Name string
	// TokenID is the first 8 hex digits of the token's hash ("loopback" in dev mode).
	TokenID string
}

// Actor is the audit actor string: "agent:NAME", "approver:NAME" or "admin:<token id>". The engine records
// worker calls under the worker_id of the request ("worker:ID"); for a worker token outside those
// calls the token id stands in.
func (id Identity) Actor() string {
	switch id.Role {
	case RoleAgent:
		return "agent:" + id.Agent
	case RoleWorker:
		return "worker:" + id.TokenID
	case RoleApprover:
		return "approver:" + id.Name
	}
	return "admin:" + id.TokenID
}

// identityKey is the gin context key of the request's Identity.
const identityKey = "orchestrator.identity"

// loopbackTokenID marks the identity of an unauthenticated loopback request in dev mode.
const loopbackTokenID = "loopback"

// IdentityFrom returns the identity that the auth middleware put in c.
func IdentityFrom(c *gin.Context) (Identity, bool) {
	v, ok := c.Get(identityKey)
	if !ok {
		return Identity{}, false
	}
	id, ok := v.(Identity)
	return id, ok
}

// SetTokens replaces the accepted tokens (a reload of the tokens file): from the next request
// on, a token that is no longer in t is refused. The requests already authenticated finish.
func (s *Server) SetTokens(t *Tokens) { s.tokens.Store(t) }

// mustIdentity returns the identity of a route behind requireRole.
func mustIdentity(c *gin.Context) Identity {
	id, _ := IdentityFrom(c)
	return id
}

func unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: msg}
}

// noTokensMessage tells an operator how to get out of a 401 on a server with no token at all.
const noTokensMessage = "no API token is configured on this server: create one with " +
	"`orchestrator token create --role admin`, add its line to the tokens file (tokens_file, " +
	"ORCH_TOKENS_FILE) or to " + TokensEnv + ", and send it as \"Authorization: Bearer <token>\""

// authenticate resolves the request's identity without deciding whether it may proceed.
func (s *Server) authenticate(c *gin.Context) (Identity, *Error) {
	tokens := s.tokens.Load()
	if tokens.Len() == 0 {
		// guardRequests has refused a Host that is not loopback already; checked again here so
		// that admin is never granted without it.
		if s.auth.AllowUnauthenticatedLoopback && isLoopback(c.Request.RemoteAddr) && loopbackHost(c.Request.Host) {
			return Identity{Role: RoleAdmin, TokenID: loopbackTokenID}, nil
		}
		return Identity{}, unauthorized(noTokensMessage)
	}
	token, ok := bearerToken(c.Request.Header.Get("Authorization"))
	if !ok {
		return Identity{}, unauthorized("missing bearer token: send \"Authorization: Bearer <token>\"")
	}
	rec, ok := tokens.Lookup(token)
	if !ok {
		return Identity{}, unauthorized("unknown token")
	}
	return Identity{Role: rec.Role, Agent: rec.Agent, Name: rec.Name, TokenID: rec.ID()}, nil
}

// requireRole authenticates the request and lets it through only for the given roles. The
// identity is stored in the gin context for the handler.
func (s *Server) requireRole(roles ...Role) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, err := s.authenticate(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		if !slices.Contains(roles, id.Role) {
			s.writeError(c, forbidden("a token of role %s may not call %s %s", id.Role, c.Request.Method, c.FullPath()))
			return
		}
		c.Set(identityKey, id)
		c.Next()
	}
}

// bearerToken extracts the token of an "Authorization: Bearer <token>" header (scheme
// case-insensitive, as RFC 9110 says).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// isLoopback reports whether a RemoteAddr is on a loopback address. Forwarding headers are not
// trusted: a proxy on the same host makes every request loopback, which is why this is dev-only.
func isLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// agentScope returns the agent a request is limited to: the token's agent for role agent, ""
// (any) otherwise.
func agentScope(id Identity) string {
	if id.Role == RoleAgent {
		return id.Agent
	}
	return ""
}
