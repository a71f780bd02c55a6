package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// Body limits. A submit may carry a payload of config.MaxPayloadBytes plus this much envelope;
// internal calls carry up to maxItems results, each with its output.
const (
	submitEnvelopeBytes = 64 << 10
	internalBodyBytes   = 8 << 20
)

// decodeJSON reads the request body into dst strictly: at most limit bytes (413 beyond), exactly
// one JSON value (trailing data is a 400), no unknown fields (a 400 naming the field).
func decodeJSON(c *gin.Context, limit int64, dst any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	c.Request.Body = body
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	// Exactly one value: what follows may only be white space.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			return err
		}
		return badRequest("", "unexpected data after the JSON body")
	}
	return nil
}

// decodeError turns a decoder error into a 400 naming the field where it can, or passes a
// *http.MaxBytesError through (413).
func decodeError(err error) error {
	var (
		maxBytes  *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxBytes):
		return err
	case errors.Is(err, io.EOF):
		return badRequest("", "request body is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "request body is truncated JSON")
	case errors.As(err, &syntaxErr):
		return badRequest("", "request body is not valid JSON (at byte %d): %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("", "request body must be a JSON object, not %s", typeErr.Value)
		}
		return badRequest(typeErr.Field, "want %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return badRequest(name, "unknown field %q", name)
	}
	return badRequest("", "cannot decode the request body: %s", err.Error())
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice", kind == "array":
		return "an array"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return fmt.Sprintf("a %s", kind)
}
