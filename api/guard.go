package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// CodeUnsupportedMediaType is the code of a 415: a request body that is not application/json.
const CodeUnsupportedMediaType = "unsupported_media_type"

// guardRequests runs before every route. Every request body must be declared
// application/json: the API reads nothing else, and a browser cannot send that type to another
// site without asking first (a CORS preflight, which this API never grants), so no web page
// can post a form or text/plain to it. In tokenless mode (tokenless) it also refuses what a
// web page the operator visits could send to a server that admits loopback callers as admin:
//
//   - a Host that is not a loopback name or address (403): a DNS-rebinding page reaches
//     127.0.0.1 under its own domain name, which is what its requests carry as Host;
//   - a browser Origin other than the server's own (403), and a request a browser marks
//     Sec-Fetch-Site: cross-site (403).
//
// With tokens configured neither applies: a browser does not attach a bearer token to a
// request it sends on a page's behalf, and the API answers no CORS preflight.
func (s *Server) guardRequests(c *gin.Context) {
	r := c.Request
	if s.tokenless() {
		if !loopbackHost(r.Host) {
			s.writeError(c, forbidden("without API tokens this server answers requests for localhost only, "+
				"not for Host %q: call it as localhost, 127.0.0.1 or [::1], or configure tokens", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r) {
			s.writeError(c, forbidden("without API tokens this server refuses requests from web pages of other "+
				"origins (Origin %q)", origin))
			return
		}
		if strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
			s.writeError(c, forbidden("without API tokens this server refuses cross-site requests from web pages"))
			return
		}
	}
	if hasBody(r) && !isJSON(r.Header.Get("Content-Type")) {
		s.writeError(c, &Error{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
			Message: "a request body must be JSON, sent with \"Content-Type: application/json\""})
		return
	}
	c.Next()
}

// tokenless reports whether the server admits loopback callers without a token: dev mode
// (AuthOptions.AllowUnauthenticatedLoopback) with no token configured.
func (s *Server) tokenless() bool {
	return s.auth.AllowUnauthenticatedLoopback && s.tokens.Load().Len() == 0
}

// hasBody reports whether r carries a body: a length above zero, or one not known in advance
// (chunked).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// isJSON reports whether a Content-Type header is application/json (parameters, such as
// charset, allowed).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// loopbackHost reports whether a Host header names this machine's loopback interface:
// localhost, an address of 127.0.0.0/8 or ::1, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether a browser's Origin header is r's own origin: the scheme r came in
// with and its Host. "null" (a sandboxed page, a file) is never the same.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(u.Host, r.Host)
}
