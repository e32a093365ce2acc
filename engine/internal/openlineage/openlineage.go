// Package openlineage builds OpenLineage run events (https://openlineage.io, spec 2-0-2) for the
// attempts of dcc-flow steps that read or wrote files, and emits them to an HTTP endpoint (for
// example Marquez's /api/v1/lineage), to a JSON-lines file, or to both (docs/guide/openlineage.md).
//
// One attempt is one OpenLineage run: its runId is a UUID derived from the dcc-flow run id,
// step key and attempt number (AttemptUUID), so the START and the COMPLETE or FAIL of one attempt
// share it; its job is Config.Namespace and "workflow.step_key". The files it read and wrote are
// its input and output datasets, named per the OpenLineage naming conventions for files
// (DatasetName).
//
// An Emitter never blocks its caller: Emit encodes the event and queues it; one goroutine
// delivers the queue. What cannot be queued (the queue is full) is counted by Dropped, what
// cannot be delivered (the endpoint keeps failing, the file cannot be written) by Failed; both
// are reported through Config.OnError. The package never panics on bad input and never writes
// to stdout or stderr.
package openlineage

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultNamespace = "dcc-flow"
	DefaultTimeout   = 5 * time.Second
	DefaultQueueSize = 1000
	// DefaultProducer is the producer URI stamped on every event and facet when Config.Producer
	// is "".
	DefaultProducer = "https://github.com/dcc-flow/dcc-flow"
)

// Limits on what one event carries (hostile or merely huge input stays bounded).
const (
	// MaxDatasets is the most input datasets, and the most output datasets, one event lists;
	// the ones past it are left out and counted in the dccFlow_attempt facet
	// (inputsOmitted, outputsOmitted).
	MaxDatasets = 2000
	// MaxErrorBytes bounds the error message and the stack trace of the errorMessage facet;
	// a longer one is cut (at a UTF-8 boundary) and ends in "… [N bytes cut]".
	MaxErrorBytes = 64 << 10
	// MaxEnvBytes bounds the encoded environment of the dccFlow_attempt facet; a larger one is
	// left out (and reported through OnError).
	MaxEnvBytes = 256 << 10
)

// Config says where events go. URL and File may both be set: each event is then appended to
// the file and POSTed. Its zero value is not valid (nowhere to send); Validate says why. The
// engine's `openlineage` settings (docs/guide/openlineage.md) map onto it; messages name the
// fields by those settings' keys (url, file, namespace, timeout, queue_size, producer,
// api_key).
type Config struct {
	// URL is an HTTP(S) endpoint taking one POSTed event per request, such as Marquez's
	// http://marquez:5000/api/v1/lineage. "" = no HTTP.
	URL string
	// APIKey, when set, is sent as "Authorization: Bearer APIKEY" with every POST (the
	// api_key auth of the OpenLineage clients' HTTP transport). It never appears in messages.
	APIKey string
	// File is a JSON-lines file each event is appended to, one line per event; created (0644)
	// when missing. "" = no file.
	File string
	// Namespace is the OpenLineage job namespace of every event; "" = DefaultNamespace.
	Namespace string
	// Timeout bounds one HTTP request (connection, upload, response); 0 = DefaultTimeout.
	Timeout time.Duration
	// QueueSize is how many events may wait for delivery; Emit drops (and counts) an event
	// when that many already wait. 0 = DefaultQueueSize.
	QueueSize int
	// Producer is the URI stamped as producer on events and as _producer on facets, for
	// example "https://github.com/dcc-flow/dcc-flow/tree/v0.1.0"; "" = DefaultProducer.
	Producer string
	// OnError, when set, is told of every event that was dropped or not delivered, and of
	// every part of an event left out (an environment that does not encode). It is called
	// from Emit (a full queue, an event that does not encode) and from the delivery goroutine,
	// never concurrently with itself from the latter; a panic in it is recovered.
	OnError func(error)
}

// Validate reports the first problem of c, naming the field and the fix; nil when c is usable
// as is (zero Namespace, Timeout, QueueSize and Producer take their defaults).
func (c Config) Validate() error {
	if strings.TrimSpace(c.URL) == "" && strings.TrimSpace(c.File) == "" {
		return errors.New("openlineage: neither url nor file is set: set url to an HTTP endpoint " +
			"taking OpenLineage events (e.g. http://localhost:5000/api/v1/lineage for Marquez), " +
			"or file to a JSON-lines file to append them to, or leave OpenLineage off")
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil {
			return fmt.Errorf("openlineage: url %q does not parse (%v): give a full URL such as "+
				"http://localhost:5000/api/v1/lineage", redactURL(c.URL), errors.Unwrap(err))
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("openlineage: url %q has scheme %q: use http:// or https:// "+
				"(e.g. http://localhost:5000/api/v1/lineage)", u.Redacted(), u.Scheme)
		}
		if u.Host == "" {
			return fmt.Errorf("openlineage: url %q has no host: give one, as in "+
				"http://localhost:5000/api/v1/lineage", u.Redacted())
		}
	}
	if c.APIKey != "" && c.URL == "" {
		return errors.New("openlineage: api_key is set without url: set url too, or drop api_key (a file needs none)")
	}
	if strings.ContainsAny(c.APIKey, "\r\n\x00") {
		return errors.New("openlineage: api_key contains a line break or NUL byte: give the key alone")
	}
	if c.File != "" && strings.ContainsRune(c.File, 0) {
		return errors.New("openlineage: file contains a NUL byte: give a plain file path")
	}
	if c.Namespace != "" && strings.TrimSpace(c.Namespace) == "" {
		return errors.New("openlineage: namespace is blank: give a name such as \"dcc-flow\" or \"studio-prod\", or leave it out for \"dcc-flow\"")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("openlineage: timeout is %v: give a positive duration, or 0 for %v", c.Timeout, DefaultTimeout)
	}
	if c.QueueSize < 0 {
		return fmt.Errorf("openlineage: queue_size is %d: give a positive number of events, or 0 for %d", c.QueueSize, DefaultQueueSize)
	}
	if c.Producer != "" {
		u, err := url.Parse(c.Producer)
		if err != nil || u.Scheme == "" {
			return fmt.Errorf("openlineage: producer %q is not an absolute URI: give one such as %q, or leave it out", c.Producer, DefaultProducer)
		}
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Producer == "" {
		c.Producer = DefaultProducer
	}
	return c
}

// redactURL hides the password of a URL that may not parse (for messages).
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "…@" + s[i+1:]
		}
	}
	return s
}

// Event types (OpenLineage RunEvent eventType). The engine emits Start when an attempt
// begins and Complete or Fail when it ends; Abort suits an attempt that was cancelled.
const (
	Start    = "START"
	Running  = "RUNNING"
	Complete = "COMPLETE"
	Abort    = "ABORT"
	Fail     = "FAIL"
	Other    = "OTHER"
)

// Event is one state change of one attempt of one step.
type Event struct {
	// Type is Start, Complete, Fail (or Running, Abort, Other).
	Type string
	// Time is when it happened; zero = when Emit is called.
	Time time.Time
	// RunID, StepKey ("publish", "per_shot[2].render") and Attempt (1 for the first) name the
	// attempt; RunID and StepKey must not be "", Attempt must not be negative.
	RunID   string
	StepKey string
	Attempt int
	// Workflow is the run's workflow name ("" for an unnamed one) and Tool the step's tool
	// ("" for none).
	Workflow, Tool string
	// ParentRunID is the run that started this run as its child (a `kind: workflow` step);
	// "" for a run started on its own.
	ParentRunID string
	// Inputs are the files the attempt read, Outputs the ones it wrote. A dataset with an
	// empty Path is skipped, and one listed twice is listed once.
	Inputs, Outputs []Dataset
	// ErrorMessage and ErrorTrace say why a Fail (or Abort) attempt failed; ignored for the
	// other types.
	ErrorMessage, ErrorTrace string
	// Env is the environment the attempt ran in (DCC name and version, plugin versions), as
	// recorded with the attempt; nil = none.
	Env map[string]any
}

// Dataset is one file an attempt read or wrote.
type Dataset struct {
	// Path is absolute, in its OS's form: "/mnt/show/a.usd", `C:\show\a.usd`,
	// `\\server\share\a.usd`.
	Path string
	// Hash is the content hash ("blake3:" and 64 hex digits); "" when the file was not hashed
	// (missing, unreadable). It becomes the dataset's version.
	Hash string
	// Size is the file's size in bytes.
	Size int64
}
