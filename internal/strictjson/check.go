// Package strictjson checks what encoding/json lets through and the databases refuse or read
// otherwise: invalid UTF-8 (kept as is in a json.RawMessage; MariaDB refuses it, Error 1366),
// lone surrogate escapes ("\ud800": MariaDB's JSON_VALID refuses them), nesting deeper than a
// limit (SQLite's json_valid refuses more than 1,000 levels, MariaDB's JSON_VALID 32),
// duplicate keys (encoding/json keeps the last, other readers the first), and keys that match a
// struct field only case-insensitively (encoding/json takes "Type" for "type").
//
// Check is one pass over the bytes with no allocation on the common path: it runs on every
// request body before encoding/json decodes it. It does not check the syntax: on malformed
// JSON it stops without a problem, and the decoder names the syntax error.
package strictjson

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects a request body may have, the body's
// own object 1 deep. SQLite's json_valid refuses documents nested deeper than 1,000 levels;
// a payload of a body within this limit is well inside it.
const MaxDepth = 512

// Problem is what Check refuses, and where.
type Problem struct {
	// Path names the offending value or key from the root: "payload.a[3].b"; "" for the root.
	Path string
	// Message says what is wrong, for a person.
	Message string
	// InField is the name of the root object's field the problem lies in ("" at the root).
	InField string
}

func (p *Problem) Error() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Check checks data, one JSON value decoded into a type of shape s, nested at most maxDepth
// deep counting from the value's own depth base (the depth its container has: 0 for a body).
// It returns the first problem, or nil (also for malformed JSON, which the decoder refuses).
func Check(data []byte, s *Shape, maxDepth, base int) *Problem {
	c := checkers.Get().(*checker)
	c.data, c.pos, c.depth, c.maxDepth, c.problem, c.stop, c.inKey = data, 0, base, maxDepth, nil, false, false
	defer c.release()
	c.skipSpace()
	c.value(s, limit{at: maxDepth})
	return c.problem
}

// checkers keeps checkers and the capacity of their slices between checks: a check of a small
// document then allocates nothing.
var checkers = sync.Pool{New: func() any { return new(checker) }}

// release returns c to checkers without what refers to the checked document.
func (c *checker) release() {
	clear(c.path[:cap(c.path)])
	clear(c.keys[:cap(c.keys)])
	clear(c.sets[:cap(c.sets)])
	c.data, c.problem = nil, nil
	c.path, c.keys, c.starts, c.sets = c.path[:0], c.keys[:0], c.starts[:0], c.sets[:0]
	checkers.Put(c)
}

// segment is one step of the path to the value being checked: a key or an index.
type segment struct {
	key   []byte // a key as it appears in the data (escapes undone when it had some)
	index int    // -1 for a key
}

type checker struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
	path     []segment
	problem  *Problem
	stop     bool // a problem was found, or the JSON is malformed: unwind
	inKey    bool // str reads a key: its problem is the object's
	// keys holds the keys of the objects being checked, one run per open object (from the
	// index in starts): duplicates are found by comparison, without a map for small objects.
	keys   [][]byte
	starts []int
	// sets holds, per open object, the set of its keys once it has more than
	// keysBeforeSet of them (nil before): a big object costs no quadratic comparisons.
	sets []map[string]struct{}
}

// keysBeforeSet is how many keys an object's duplicates are searched among by comparison.
const keysBeforeSet = 16

// fail records a problem at the current path and stops the check.
func (c *checker) fail(format string, args ...any) {
	if c.stop {
		return
	}
	c.problem = &Problem{Path: c.renderPath(), Message: fmt.Sprintf(format, args...)}
	if len(c.path) > 0 && c.path[0].index < 0 {
		c.problem.InField = string(c.path[0].key)
	}
	c.stop = true
}

// malformed stops the check without a problem: the decoder will name the syntax error.
func (c *checker) malformed() { c.stop = true }

// pathMax is how many steps of a path a problem names: a value nested 600 deep is named by
// where its nesting starts, not by 600 indexes.
const pathMax = 20

func (c *checker) renderPath() string {
	var b strings.Builder
	for i, s := range c.path {
		if i == pathMax {
			b.WriteString("…")
			break
		}
		if s.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.ToValidUTF8(string(s.key), "\uFFFD"))
	}
	return b.String()
}

func (c *checker) skipSpace() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value checks the value at c.pos, of shape s, whose nesting may reach lim.
func (c *checker) value(s *Shape, lim limit) {
	if c.pos >= len(c.data) {
		c.malformed()
		return
	}
	switch c.data[c.pos] {
	case '{':
		if s.kind == kindDeferred {
			c.skipValue()
			return
		}
		c.object(s, lim)
	case '[':
		if s.kind == kindDeferred {
			c.skipValue()
			return
		}
		c.array(s, lim)
	case '"':
		if _, ok := c.str(); !ok {
			return
		}
	default:
		// A number or a literal: the decoder checks its syntax.
		for c.pos < len(c.data) {
			switch c.data[c.pos] {
			case ',', ']', '}', ' ', '\t', '\n', '\r', ':':
				return
			}
			c.pos++
		}
	}
}

// limit is how deep a value may nest: at, an absolute depth; own, the limit of the field
// that set it, counted from the field's value (0: the document's limit).
type limit struct{ at, own int }

// enter opens an array or object at c.pos: false (and a problem) when it nests too deep.
func (c *checker) enter(lim limit) bool {
	c.depth++
	if c.depth > lim.at {
		if lim.own > 0 {
			c.fail("nests deeper than %d levels of arrays and objects, the limit of this field", lim.own)
		} else {
			c.fail("nests deeper than %d levels of arrays and objects", c.maxDepth)
		}
		return false
	}
	c.pos++
	return true
}

func (c *checker) object(s *Shape, lim limit) {
	if !c.enter(lim) {
		return
	}
	defer func() { c.depth-- }()
	c.starts = append(c.starts, len(c.keys))
	c.sets = append(c.sets, nil)
	defer func() {
		c.keys = c.keys[:c.starts[len(c.starts)-1]]
		c.starts = c.starts[:len(c.starts)-1]
		c.sets = c.sets[:len(c.sets)-1]
	}()
	c.skipSpace()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return
	}
	for !c.stop {
		c.skipSpace()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			c.malformed()
			return
		}
		c.inKey = true
		key, ok := c.str()
		c.inKey = false
		if !ok {
			return
		}
		c.path = append(c.path, segment{key: key, index: -1})
		if c.duplicate(key) {
			c.fail("duplicate key %q", strings.ToValidUTF8(string(key), "\uFFFD"))
			return
		}
		child, childLimit := Any, lim
		switch s.kind {
		case kindStruct:
			f, known := s.fields[string(key)]
			if !known {
				name := strings.ToValidUTF8(string(key), "\uFFFD")
				if exact, ok := s.lower[strings.ToLower(name)]; ok {
					c.fail("unknown field %q (field names are case-sensitive: %q)", name, exact)
				} else {
					c.fail("unknown field %q", name)
				}
				return
			}
			child = f.shape
			if f.maxDepth > 0 && c.depth+f.maxDepth < lim.at {
				childLimit = limit{at: c.depth + f.maxDepth, own: f.maxDepth}
			}
		case kindMap:
			child = s.elem
		}
		c.skipSpace()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			c.malformed()
			return
		}
		c.pos++
		c.skipSpace()
		c.value(child, childLimit)
		if c.stop {
			return
		}
		c.path = c.path[:len(c.path)-1]
		if !c.another('}') {
			return
		}
	}
}

// another reads what follows a member or an element: a comma (true: another follows) or the
// closing byte (false); anything else is malformed (false).
func (c *checker) another(closing byte) bool {
	c.skipSpace()
	if c.pos >= len(c.data) {
		c.malformed()
		return false
	}
	switch c.data[c.pos] {
	case ',':
		c.pos++
		return true
	case closing:
		c.pos++
		return false
	}
	c.malformed()
	return false
}

// duplicate reports whether key is a key of the current object already, and adds it.
func (c *checker) duplicate(key []byte) bool {
	top := len(c.sets) - 1
	if set := c.sets[top]; set != nil {
		if _, dup := set[string(key)]; dup {
			return true
		}
		set[string(key)] = struct{}{}
		return false
	}
	run := c.keys[c.starts[top]:]
	for _, k := range run {
		if string(k) == string(key) {
			return true
		}
	}
	if len(run) < keysBeforeSet {
		c.keys = append(c.keys, key)
		return false
	}
	set := make(map[string]struct{}, 2*keysBeforeSet)
	for _, k := range run {
		set[string(k)] = struct{}{}
	}
	set[string(key)] = struct{}{}
	c.sets[top] = set
	return false
}

func (c *checker) array(s *Shape, lim limit) {
	if !c.enter(lim) {
		return
	}
	defer func() { c.depth-- }()
	elem := Any
	if s.kind == kindArray {
		elem = s.elem
	}
	c.skipSpace()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return
	}
	for i := 0; !c.stop; i++ {
		c.path = append(c.path, segment{index: i})
		c.skipSpace()
		c.value(elem, lim)
		if c.stop {
			return
		}
		c.path = c.path[:len(c.path)-1]
		if !c.another(']') {
			return
		}
	}
}

// str checks the string at c.pos (its opening quote) and moves past it. It returns its
// content: the raw bytes, or with its escapes undone when it has any (to compare keys).
func (c *checker) str() ([]byte, bool) {
	start := c.pos + 1
	i := start
	ascii, escaped := true, false
	for {
		if i >= len(c.data) {
			c.malformed()
			return nil, false
		}
		b := c.data[i]
		if b == '"' {
			break
		}
		if b >= utf8.RuneSelf {
			ascii = false
			i++
			continue
		}
		if b != '\\' {
			i++
			continue
		}
		escaped = true
		if i+1 >= len(c.data) {
			c.malformed()
			return nil, false
		}
		if c.data[i+1] != 'u' {
			i += 2
			continue
		}
		r, ok := hex4(c.data, i+2)
		if !ok {
			c.malformed()
			return nil, false
		}
		i += 6
		what := "holds"
		if c.inKey {
			what = "holds a key with"
		}
		switch {
		case 0xDC00 <= r && r <= 0xDFFF:
			c.fail("%s the escape \\u%04x, the second half of a surrogate pair without its first: not a character", what, r)
			return nil, false
		case 0xD800 <= r && r <= 0xDBFF:
			if i+1 < len(c.data) && c.data[i] == '\\' && c.data[i+1] == 'u' {
				if lo, ok := hex4(c.data, i+2); ok && 0xDC00 <= lo && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			c.fail("%s the escape \\u%04x, the first half of a surrogate pair without its second: not a character", what, r)
			return nil, false
		}
	}
	raw := c.data[start:i]
	c.pos = i + 1
	if !ascii && !utf8.Valid(raw) {
		if c.inKey {
			c.fail("holds a key that is not valid UTF-8")
		} else {
			c.fail("is not valid UTF-8")
		}
		return nil, false
	}
	if escaped {
		return unescape(raw), true
	}
	return raw, true
}

// hex4 reads the 4 hex digits at data[at:].
func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, b := range data[at : at+4] {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	return r, true
}

// unescape undoes the escapes of a string's content that str has checked. Only keys with
// escapes come here: to find "a" and "\u0061" to be the same key.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(raw, i+1)
			i += 4
			if 0xD800 <= r && r <= 0xDBFF {
				lo, _ := hex4(raw, i+3)
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default: // " \ /
			out = append(out, raw[i])
		}
	}
	return out
}

// skipValue moves past the value at c.pos without checking it (it is checked on its own
// later); strings are walked over so that their brackets do not count.
func (c *checker) skipValue() {
	depth := 0
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case '"':
			i := c.pos + 1
			for i < len(c.data) && c.data[i] != '"' {
				if c.data[i] == '\\' {
					i++
				}
				i++
			}
			c.pos = i + 1
			if depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				c.pos++
				return
			}
		}
		c.pos++
	}
	c.malformed()
}
