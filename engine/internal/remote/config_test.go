package remote

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none means valid
	}{
		{"http", Config{URL: "http://127.0.0.1:8765/mcp", Headers: map[string]string{"X-Studio": "a"}, TokenEnv: "TOKEN", Timeout: time.Second}, nil},
		{"https", Config{URL: "https://mcp.example.com/mcp"}, nil},
		{"stdio", Config{Command: []string{"mayapy", "-m", "server"}, Env: map[string]string{"MAYA_APP_DIR": "/tmp"}, Dir: "/tmp"}, nil},
		{"neither", Config{}, []string{"url: one of url (streamable HTTP) or command (stdio) is required"}},
		{"both", Config{URL: "http://h/mcp", Command: []string{"x"}}, []string{"url: url and command are mutually exclusive"}},
		{"scheme", Config{URL: "ftp://h/mcp"}, []string{`url: scheme must be http or https, not "ftp"`}},
		{"no host", Config{URL: "http:///mcp"}, []string{"url: host is missing"}},
		{"unparsable", Config{URL: "http://h/%zz"}, []string{"url: "}},
		{"empty program", Config{Command: []string{" "}}, []string{"command: the program (command[0]) is empty"}},
		{"negative timeout", Config{URL: "http://h/mcp", Timeout: -1}, []string{"timeout: must not be negative"}},
		{"bad header", Config{URL: "http://h/mcp", Headers: map[string]string{"Bad Header": "x"}}, []string{`headers: invalid header name "Bad Header"`}},
		{"auth twice", Config{URL: "http://h/mcp", Headers: map[string]string{"authorization": "x"}, TokenEnv: "T"}, []string{"headers: Authorization is set by token_env"}},
		{"bad token env", Config{URL: "http://h/mcp", TokenEnv: "A=B"}, []string{"token_env: invalid environment variable name"}},
		{"http options on stdio", Config{Command: []string{"x"}, Headers: map[string]string{"X": "y"}, TokenEnv: "T"},
			[]string{"headers: only valid with url", "token_env: only valid with url"}},
		{"stdio options on http", Config{URL: "http://h/mcp", Env: map[string]string{"A": "b"}, Dir: "/tmp"},
			[]string{"env: only valid with command", "dir: only valid with command"}},
		{"bad env name", Config{Command: []string{"x"}, Env: map[string]string{"": "v"}}, []string{`env: invalid environment variable name ""`}},
		{"every problem at once", Config{URL: "ftp://h", Timeout: -1, Dir: "/x"},
			[]string{"url: scheme", "dir: only valid", "timeout: must not"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
				t.Errorf("Validate() gave %d problems (%q), want %d", n, err, len(tc.want))
			}
		})
	}
}
