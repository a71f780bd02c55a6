package strictjson

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type inner struct {
	Name string `json:"name"`
}

type body struct {
	JobID    string            `json:"job_id"`
	Payload  json.RawMessage   `json:"payload"`
	Meta     json.RawMessage   `json:"metadata"`
	Inner    *inner            `json:"inner"`
	List     []inner           `json:"list"`
	Tags     map[string]string `json:"tags"`
	Later    []json.RawMessage `json:"later"`
	Embedded                   // promoted: "extra"
	skipped  int               //nolint:unused // unexported on purpose: the shape must skip it
}

type Embedded struct {
	Extra int `json:"extra"`
}

var bodyShape = ShapeOf(reflect.TypeFor[body](), func(_ reflect.Type, name string) FieldRule {
	switch name {
	case "metadata":
		return FieldRule{MaxDepth: 3}
	case "later":
		return FieldRule{Deferred: true}
	}
	return FieldRule{}
})

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, doc, path, msg string
	}{
		{"Fine", `{"job_id":"a","payload":{"x":[1,"\u00e9\ud83d\ude00",{"y":null}]},"inner":{"name":"n"},"extra":1}`, "", ""},
		{"FineWithSpace", " {\n\t\"job_id\" : \"a\" , \"payload\" : [ ] } ", "", ""},
		{"Malformed", `{"job_id":`, "", ""},
		{"MalformedString", `{"job_id":"a`, "", ""},
		{"NotAnObject", `[1,2]`, "", ""},
		{"CaseMismatch", `{"Job_ID":"a"}`, "Job_ID", `unknown field "Job_ID" (field names are case-sensitive: "job_id")`},
		{"Unknown", `{"priority":1}`, "priority", `unknown field "priority"`},
		{"UnknownNested", `{"inner":{"Name":"x"}}`, "inner.Name", "case-sensitive"},
		{"UnknownInList", `{"list":[{"name":"a"},{"nme":"b"}]}`, "list[1].nme", "unknown field"},
		{"Duplicate", `{"job_id":"a","job_id":"b"}`, "job_id", `duplicate key "job_id"`},
		{"DuplicateEscaped", `{"job_id":"a","job\u005fid":"b"}`, "job_id", "duplicate key"},
		{"DuplicateInPayload", `{"payload":{"a":1,"b":{"c":1,"c":2}}}`, "payload.b.c", "duplicate key"},
		{"DuplicateInMap", `{"tags":{"a":"1","a":"2"}}`, "tags.a", "duplicate key"},
		{"SameKeyInSiblings", `{"payload":[{"a":1},{"a":2}],"tags":{"a":"x"}}`, "", ""},
		{"InvalidUTF8", "{\"payload\":{\"a\":[\"ok\",\"\xff\"]}}", "payload.a[1]", "not valid UTF-8"},
		{"InvalidUTF8Key", "{\"payload\":{\"\xffa\":1}}", "payload", "key that is not valid UTF-8"},
		{"SurrogateEncoded", "{\"payload\":\"\xed\xa0\x80\"}", "payload", "not valid UTF-8"},
		{"LoneHigh", `{"payload":"\ud800"}`, "payload", "first half of a surrogate pair"},
		{"LoneHighThenEscape", `{"payload":"\ud800\u0041"}`, "payload", "first half"},
		{"LoneLow", `{"payload":"x\uDC00"}`, "payload", "second half"},
		{"LoneInKey", `{"payload":{"\ud800":1}}`, "payload", "key with the escape"},
		{"DeepPayload", `{"payload":` + nested(10) + `}`, "payload[0][0][0][0][0][0][0][0]", "nests deeper than 9 levels"},
		{"DeepMetadata", `{"metadata":{"a":{"b":{"c":{}}}}}`, "metadata.a.b.c", "limit of this field"},
		{"MetadataAtItsLimit", `{"metadata":{"a":{"b":[1]}}}`, "", ""},
		{"DeferredIsNotChecked", `{"later":[{"Job_ID":"\ud800","x":1,"x":2},"]}\"",[[[[[[[[[[[]]]]]]]]]]]]}`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := Check([]byte(c.doc), bodyShape, 9, 0)
			if c.msg == "" {
				require.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			require.Equal(t, c.path, p.Path)
			require.Contains(t, p.Message, c.msg)
		})
	}
}

func TestCheckLongPath(t *testing.T) {
	t.Parallel()
	p := Check([]byte(`{"payload":`+nested(600)+`}`), bodyShape, 512, 0)
	require.NotNil(t, p)
	require.Equal(t, "payload"+strings.Repeat("[0]", pathMax-1)+"…", p.Path)
	require.Equal(t, "payload", p.InField)
}

func TestCheckBase(t *testing.T) {
	t.Parallel()
	require.Nil(t, Check([]byte(nested(5)), Any, 7, 2))
	p := Check([]byte(nested(6)), Any, 7, 2)
	require.NotNil(t, p)
	require.Equal(t, "[0][0][0][0][0]", p.Path)
}

// TestCheckBigObject: duplicates among many keys are found without quadratic cost.
func TestCheckBigObject(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("{")
	for i := range 200000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":0`)
	}
	require.Nil(t, Check([]byte(b.String()+"}"), Any, 10, 0))
	p := Check([]byte(b.String()+`,"k199998":1}`), Any, 10, 0)
	require.NotNil(t, p)
	require.Equal(t, "k199998", p.Path)
}

// FuzzCheck: Check never panics, and on what encoding/json accepts it agrees with it on UTF-8
// and duplicate keys: a document it passes decodes, into any, to the same value its bytes
// re-encoded from that value decode to.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, nested(20), `{"job_id":"x","Payload":1}`,
		`{"a":"\ud83d\ude00","b":[{"c":"\\"}]}`, `{"later":["]"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := Check(data, bodyShape, 12, 0)
		_ = Check(data, Any, 12, 0) // any verdict will do on arbitrary input; it must not panic
		if p != nil || !json.Valid(data) {
			return
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return // too deep for encoding/json, say
		}
		again, err := json.Marshal(v)
		require.NoError(t, err)
		require.Nil(t, Check(again, Any, 12, 0), "re-encoded %s", again)
	})
}

// BenchmarkCheckJob is the check of one job of a batch, as decodeBatchJob runs it.
func BenchmarkCheckJob(b *testing.B) {
	job := []byte(`{"job_id":"batch-000000001","payload":{"prompt":"hello","n":3,"opts":{"t":0.5}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if p := Check(job, bodyShape, MaxDepth, 2); p != nil {
			b.Fatal(p)
		}
	}
}
