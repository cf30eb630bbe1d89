package stream

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultUnmarshaller(t *testing.T) {
	t.Parallel()
	md, err := EncodeMetadata(map[string]string{"k": "v", "empty": ""})
	require.NoError(t, err)
	for _, tc := range []struct {
		name        string
		values      map[string]any
		wantUUID    string // "" means: a generated one
		wantPayload string
		wantMD      map[string]string
		wantPoison  string // substring; "" for none
	}{
		{name: "Full", values: map[string]any{FieldUUID: "u", FieldPayload: "p", FieldMetadata: md},
			wantUUID: "u", wantPayload: "p", wantMD: map[string]string{"k": "v", "empty": ""}},
		{name: "EmptyMetadata", values: map[string]any{FieldUUID: "u", FieldPayload: "p", FieldMetadata: ""},
			wantUUID: "u", wantPayload: "p"},
		{name: "NoPayload", values: map[string]any{FieldUUID: "u"}, wantUUID: "u"},
		{name: "ExtraFields", values: map[string]any{FieldUUID: "u", FieldPayload: "p", "type": "t", "attempt": "2"},
			wantUUID: "u", wantPayload: "p"},
		{name: "MissingUUID", values: map[string]any{FieldPayload: "p"}, wantPayload: "p", wantPoison: FieldUUID},
		{name: "NonStringUUID", values: map[string]any{FieldUUID: 42, FieldPayload: "p"}, wantPayload: "p", wantPoison: FieldUUID},
		{name: "Nil", values: nil, wantPoison: FieldUUID},
		{name: "BadMetadata", values: map[string]any{FieldUUID: "u", FieldMetadata: "\xc1"}, wantUUID: "u", wantPoison: "metadata"},
		{name: "MetadataWrongType", values: map[string]any{FieldUUID: "u", FieldMetadata: "\x92\x01\x02"}, wantUUID: "u", wantPoison: "metadata"},
		{name: "MetadataCannotOverrideEntryID", values: map[string]any{FieldUUID: "u", FieldMetadata: mustEncode(t, map[string]string{EntryIDKey: "forged", StreamKey: "forged"})},
			wantUUID: "u"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg := DefaultUnmarshaller{}.Unmarshal("s", "1-0", tc.values)
			require.NotNil(t, msg)
			if tc.wantUUID != "" {
				assert.Equal(t, tc.wantUUID, msg.UUID)
			} else {
				assert.NotEmpty(t, msg.UUID)
			}
			assert.Equal(t, tc.wantPayload, string(msg.Payload))
			assert.Equal(t, "1-0", msg.Metadata.Get(EntryIDKey))
			assert.Equal(t, "s", msg.Metadata.Get(StreamKey))
			for k, v := range tc.wantMD {
				assert.Equal(t, v, msg.Metadata[k], k)
			}
			if tc.wantPoison == "" {
				assert.NotContains(t, msg.Metadata, PoisonKey)
			} else {
				assert.Contains(t, msg.Metadata.Get(PoisonKey), tc.wantPoison)
			}
		})
	}
}

func mustEncode(t *testing.T, md map[string]string) string {
	t.Helper()
	s, err := EncodeMetadata(md)
	require.NoError(t, err)
	return s
}

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	for _, md := range []map[string]string{
		nil,
		{},
		{"a": "b"},
		{"": "", "unicode": "žluťoučký kůň", "bin": "\x00\xff"},
	} {
		s, err := EncodeMetadata(md)
		require.NoError(t, err)
		if len(md) == 0 {
			assert.Empty(t, s)
			continue
		}
		got := map[string]string{}
		require.NoError(t, DecodeMetadata(s, got))
		assert.Equal(t, md, got)
	}
}
