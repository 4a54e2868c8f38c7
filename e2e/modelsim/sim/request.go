package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind tells the two completion APIs apart.
type Kind int

const (
	Chat       Kind = iota // POST /v1/chat/completions
	Completion             // POST /v1/completions
)

// Request is a parsed completion request, reduced to what the simulation needs.
type Request struct {
	Model        string
	Tokens       []string // the prompt, tokenized (see Tokenize)
	MaxTokens    int      // output tokens to produce, 1..MaxOutputTokens
	MaxTokensSet bool     // the client named max_tokens: finish_reason "length" instead of "stop"
	Stream       bool
	IncludeUsage bool // stream_options.include_usage: a final usage chunk
}

// wire is the subset of the OpenAI request body that modelsim reads. Other
// fields (temperature, tools, …) are accepted and ignored, as a real server
// would accept sampling options it cannot show the effect of.
type wire struct {
	Model               string          `json:"model"`
	Messages            []message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ParseRequest decodes and checks a request body of the given kind. Errors
// are meant for the client (a 400 with the message).
func ParseRequest(body []byte, kind Kind) (*Request, error) {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			// Name the field, not modelsim's Go types.
			return nil, fmt.Errorf("%s: wrong type (JSON %s)", te.Field, te.Value)
		}
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	r := &Request{Model: w.Model, Stream: w.Stream, MaxTokens: DefaultMaxTokens}
	if w.StreamOptions != nil {
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	mt := w.MaxCompletionTokens
	if mt == nil {
		mt = w.MaxTokens
	}
	if mt != nil {
		if *mt < 1 {
			return nil, errors.New("max_tokens must be at least 1")
		}
		r.MaxTokens, r.MaxTokensSet = min(*mt, MaxOutputTokens), true
	}

	var text string
	switch kind {
	case Chat:
		if len(w.Messages) == 0 {
			return nil, errors.New("messages: at least one message is required")
		}
		var err error
		if text, err = renderChat(w.Messages); err != nil {
			return nil, err
		}
	case Completion:
		var err error
		if text, err = renderPrompt(w.Prompt); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown request kind %d", kind)
	}
	r.Tokens = Tokenize(text)
	return r, nil
}

// Tokenize is modelsim's tokenizer: whitespace-separated words. It is
// deterministic and cheap, and it keeps a conversation's earlier turns a
// token-exact prefix of its later ones, which is all a prefix cache needs.
func Tokenize(text string) []string { return strings.Fields(text) }

// renderChat renders messages as "role: content" lines, a stand-in for a
// chat template.
func renderChat(msgs []message) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("messages[%d].role is required", i)
		}
		content, err := renderContent(m.Content)
		if err != nil {
			return "", fmt.Errorf("messages[%d].content: %w", i, err)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(content)
	}
	return b.String(), nil
}

// renderContent accepts a string, null (an assistant turn with only tool
// calls) or an array of parts, of which the text parts count.
func renderContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("must be a string or an array of content parts: %w", err)
		}
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", errors.New("must be a string or an array of content parts")
}

// renderPrompt accepts the prompt forms of /v1/completions for one prompt: a
// string, an array of one string, or an array of token ids (rendered as
// their decimal numbers). Batches of several prompts are not simulated.
func renderPrompt(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", errors.New("prompt is required")
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return "", fmt.Errorf("prompt: %w", err)
		}
		if len(items) == 0 {
			return "", errors.New("prompt must not be an empty array")
		}
		if t := bytes.TrimSpace(items[0]); len(t) > 0 && t[0] == '"' {
			if len(items) > 1 {
				return "", errors.New("prompt: batches of several prompts are not supported by modelsim")
			}
			var s string
			err := json.Unmarshal(t, &s)
			return s, err
		}
		var ids []int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return "", errors.New("prompt must be a string, an array of one string or an array of token ids")
		}
		words := make([]string, len(ids))
		for i, id := range ids {
			words[i] = strconv.FormatInt(id, 10)
		}
		return strings.Join(words, " "), nil
	}
	return "", errors.New("prompt must be a string, an array of one string or an array of token ids")
}
