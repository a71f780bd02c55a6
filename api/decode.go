package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/internal/strictjson"
	"github.com/gpuorch/orchestrator/wire"
)

// Body limits. A submit may carry a payload of config.MaxPayloadBytes plus this much envelope;
// internal calls carry up to maxItems results, each with its output.
const (
	submitEnvelopeBytes = 64 << 10
	internalBodyBytes   = 8 << 20
)

// Nesting limits of request bodies.
const (
	// MaxJSONDepth is the deepest a request body may nest arrays and objects, its own object
	// level 1: deeper is a 400 naming the value. SQLite's json_valid refuses more than 1,000
	// levels, and encoding/json more than 10,000.
	MaxJSONDepth = strictjson.MaxDepth
	// MetadataMaxDepth bounds the nesting of lease and pool metadata, the metadata object
	// level 1: MariaDB's JSON_VALID, which checks those columns, refuses 32 levels or more.
	MetadataMaxDepth = 16
)

// decodeJSON reads the request body into dst strictly: at most limit bytes (413 beyond), exactly
// one JSON value (trailing data is a 400), and a 400 naming the field for an unknown field, a
// field name whose case differs from the documented one, a key repeated in an object, a string
// that is not valid UTF-8 or holds a lone surrogate escape, or nesting past MaxJSONDepth
// (strictjson.Check, run before the decoder).
func decodeJSON(c *gin.Context, limit int64, dst any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	c.Request.Body = body
	data, err := readBody(body, c.Request.ContentLength, limit)
	if err != nil {
		return decodeError(err)
	}
	if p := strictjson.Check(data, shapeOf(dst), MaxJSONDepth, 0); p != nil {
		return badRequest(p.Path, "%s", p.Message)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	// Exactly one value: what follows may only be white space.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "unexpected data after the JSON body")
	}
	return nil
}

// readBody reads a whole body of at most limit bytes (r enforces it), into a buffer sized by
// the request's Content-Length when it has one.
func readBody(r io.Reader, contentLength, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if contentLength > 0 {
		buf.Grow(int(min(contentLength, limit)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// shapes caches the strictjson shapes of the types request bodies decode into.
var shapes sync.Map // reflect.Type → *strictjson.Shape

// shapeOf returns the shape of dst (a pointer to the body's type).
func shapeOf(dst any) *strictjson.Shape {
	t := reflect.TypeOf(dst)
	if s, ok := shapes.Load(t); ok {
		return s.(*strictjson.Shape)
	}
	s := strictjson.ShapeOf(t, fieldRule)
	shapes.Store(t, s)
	return s
}

// fieldRule is the rule of the fields checked apart from the body: metadata that MariaDB
// checks with its own nesting limit, and the jobs of a batch, each checked on its own
// (decodeBatchJob) so that a job whose payload is refused fails alone.
func fieldRule(owner reflect.Type, name string) strictjson.FieldRule {
	switch {
	case name == "metadata" && (owner == reflect.TypeFor[wire.LeaseRequest]() || owner == reflect.TypeFor[wire.PoolRequest]()):
		return strictjson.FieldRule{MaxDepth: MetadataMaxDepth}
	case name == "jobs" && owner == reflect.TypeFor[submitBatchBody]():
		return strictjson.FieldRule{Deferred: true}
	}
	return strictjson.FieldRule{}
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
