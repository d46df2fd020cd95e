package record

import (
	"reflect"
	"testing"
)

func TestEgressSuggest(t *testing.T) {
	log := []byte(`{"host":"a.example","port":443,"kind":"connect","decision":"would_refuse","reason":"host.not_allowed"}
{"host":"a.example","port":443,"kind":"connect","decision":"allow","bytes_up":100,"bytes_down":2000}
{"host":"a.example","port":80,"kind":"http","decision":"would_refuse"}
{"host":"a.example","port":80,"kind":"http","decision":"allow","bytes_up":10,"bytes_down":20}
{"host":"b.example","port":8443,"kind":"connect","decision":"would_refuse"}
{"host":"b.example","port":8443,"kind":"connect","decision":"allow","bytes_up":5,"bytes_down":6}
{"host":"listed.example","port":443,"kind":"connect","decision":"allow","bytes_up":7,"bytes_down":8}
{"host":"meta.test","port":443,"kind":"connect","decision":"refuse","reason":"address.refused"}
{"host":"pkg.example","port":443,"kind":"connect","decision":"refuse","reason":"host.not_allowed"}
{"host":"pkg.example","port":443,"kind":"connect","decision":"refuse","reason":"host.not_allowed"}
{"host":"127.0.0.1","port":8080,"kind":"connect","decision":"refuse","reason":"local.port_not_allowed"}
{"host":"10.0.0.1","port":443,"kind":"connect","decision":"refuse","reason":"host.ip_literal"}
not json
`)
	got := EgressSuggest(log)
	want := []Suggestion{
		{Entry: "127.0.0.1:8080", Host: "127.0.0.1", Port: 8080, Refused: 1},
		{Entry: "a.example", Host: "a.example", Port: 443, Connections: 2, BytesUp: 110, BytesDown: 2020},
		{Entry: "b.example:8443", Host: "b.example", Port: 8443, Connections: 1, BytesUp: 5, BytesDown: 6},
		{Entry: "pkg.example", Host: "pkg.example", Port: 443, Refused: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
