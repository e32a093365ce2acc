package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"gopkg.in/yaml.v3"
)

// jsonNodes decodes JSON text into the same yaml.Node tree the YAML path produces, so that JSON
// specs get line:column positions and go through one decoder. encoding/json reads the text, not
// yaml.v3: YAML rejects valid JSON such as the "\/" escape and surrogate pairs ("\ud83d\ude00").
// The text must already be valid JSON (checkJSON).
func jsonNodes(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &jsonParser{data: data, dec: dec, pos: yamltext.NewCursor(data)}
	n, err := p.value(0)
	if err != nil {
		return nil, err
	}
	return n, nil
}

type jsonParser struct {
	data []byte
	dec  *json.Decoder
	pos  *yamltext.Cursor // tokens come in order: line:column in linear time
}

// next returns the next token and the offset where it starts.
func (p *jsonParser) next() (json.Token, int, error) {
	off := int(p.dec.InputOffset())
	for off < len(p.data) {
		c := p.data[off]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ':' {
			off++
			continue
		}
		break
	}
	tok, err := p.dec.Token()
	return tok, off, err
}

func (p *jsonParser) node(off int) *yaml.Node {
	line, col := p.pos.LineCol(off)
	return &yaml.Node{Line: line, Column: col}
}

func (p *jsonParser) value(depth int) (*yaml.Node, error) {
	tok, off, err := p.next()
	if err != nil {
		return nil, err
	}
	return p.fromToken(tok, off, depth)
}

func (p *jsonParser) fromToken(tok json.Token, off, depth int) (*yaml.Node, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("the spec nests more than %d levels deep", MaxDepth)
	}
	n := p.node(off)
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
			for p.dec.More() {
				ktok, koff, err := p.next()
				if err != nil {
					return nil, err
				}
				key, _ := ktok.(string)
				k := p.node(koff)
				k.Kind, k.Tag, k.Value = yaml.ScalarNode, "!!str", key
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, k, v)
			}
		case '[':
			n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
			for p.dec.More() {
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		default:
			return nil, fmt.Errorf("unexpected %q", t)
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n.Kind, n.Tag, n.Value, n.Style = yaml.ScalarNode, "!!str", t, yaml.DoubleQuotedStyle
	case json.Number:
		n.Kind, n.Value = yaml.ScalarNode, t.String()
		n.Tag = "!!float"
		if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
			n.Tag = "!!int"
		}
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
	case nil:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
	default:
		return nil, fmt.Errorf("unexpected JSON token %v", tok)
	}
	return n, nil
}
