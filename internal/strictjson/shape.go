package strictjson

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
)

// kind is what a Shape expects of a JSON value.
type kind uint8

const (
	// kindAny is any JSON value (a payload, metadata, a value behind a custom unmarshaler):
	// its keys are free, but still checked for duplicates, UTF-8 and escapes.
	kindAny kind = iota
	// kindStruct is an object decoded into a struct: every key must name a field exactly.
	kindStruct
	// kindArray is an array whose elements have the shape elem.
	kindArray
	// kindMap is an object whose values have the shape elem; its keys are free.
	kindMap
	// kindDeferred is a value checked later on its own (a job of a batch): it is only
	// walked over here.
	kindDeferred
)

// Shape says how a JSON document maps onto the Go type it is decoded into: which objects are
// structs, whose keys must match a field's name exactly. Build one with ShapeOf and keep it:
// building walks the type with reflect.
type Shape struct {
	kind   kind
	elem   *Shape            // kindArray, kindMap
	fields map[string]*field // kindStruct: by the field's JSON name
	lower  map[string]string // kindStruct: lower-cased name → name, for error messages
}

// field is one field of a struct shape.
type field struct {
	shape *Shape
	// maxDepth bounds the nesting of the field's value, counted from the value itself
	// (an object is 1 deep); 0: only the document's limit.
	maxDepth int
}

// Any is the shape of a value of any JSON: Check still refuses duplicate keys, invalid UTF-8,
// lone surrogate escapes and nesting past the limit.
var Any = &Shape{kind: kindAny}

// FieldRule is how one struct field is checked, as a FieldRules function decides.
type FieldRule struct {
	// MaxDepth bounds the nesting of the field's value, the value itself 1 (0: no bound of
	// its own). For values stored in columns the database checks with a lower limit.
	MaxDepth int
	// Deferred: the value is checked later, on its own (it is only walked over).
	Deferred bool
}

// FieldRules gives the rule of field name (its JSON name) of struct type owner; nil: none.
type FieldRules func(owner reflect.Type, name string) FieldRule

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// ShapeOf builds the shape of values decoded into t by encoding/json, with rules for some of
// its fields (nil: none).
func ShapeOf(t reflect.Type, rules FieldRules) *Shape {
	return (&builder{rules: rules, seen: map[reflect.Type]*Shape{}}).shape(t)
}

type builder struct {
	rules FieldRules
	seen  map[reflect.Type]*Shape // for recursive types
}

func (b *builder) shape(t reflect.Type) *Shape {
	if s, ok := b.seen[t]; ok {
		return s
	}
	// A type that decodes itself takes any JSON as far as keys go.
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return Any
	}
	switch t.Kind() {
	case reflect.Pointer:
		return b.shape(t.Elem())
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Any // []byte is a base64 string
		}
		s := &Shape{kind: kindArray}
		b.seen[t] = s
		s.elem = b.shape(t.Elem())
		return s
	case reflect.Map:
		s := &Shape{kind: kindMap}
		b.seen[t] = s
		s.elem = b.shape(t.Elem())
		return s
	case reflect.Struct:
		s := &Shape{kind: kindStruct, fields: map[string]*field{}, lower: map[string]string{}}
		b.seen[t] = s
		b.addFields(s, t, t)
		return s
	}
	return Any
}

// addFields adds the fields of struct t to s, those of embedded structs as encoding/json
// promotes them (a field of the outer struct wins over a promoted one of the same name).
func (b *builder) addFields(s *Shape, owner, t reflect.Type) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, taken := s.fields[name]; taken {
			continue
		}
		var rule FieldRule
		if b.rules != nil {
			rule = b.rules(owner, name)
		}
		fs := b.shape(ft)
		if rule.Deferred {
			fs = &Shape{kind: kindDeferred}
		}
		s.fields[name] = &field{shape: fs, maxDepth: rule.MaxDepth}
		s.lower[strings.ToLower(name)] = name
	}
	for _, et := range embedded {
		b.addFields(s, owner, et)
	}
}
