package fence_test

import (
	"reflect"
	"strings"
	"testing"

	fence "github.com/tenure-dev/tenure/fence/go"
)

func TestParseKeysetReadsTheTextForm(t *testing.T) {
	v := loadVectors(t)
	active, older := vectorSigner(t, v, "active"), vectorSigner(t, v, "older")
	text := "# Tenure fence keys\r\n\n" +
		"  " + active.publicText() + "  # 34750f98bd59fcfc active\r\n" +
		older.publicText() + "\n" +
		"# " + vectorSigner(t, v, "stranger").publicText() + " commented out\n" +
		active.publicText() + " # listed twice\n"
	ks, err := fence.ParseKeyset(text)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ks.KeyIDs(), []string{"34750f98bd59fcfc", "6a3803d5f059902a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("KeyIDs = %v, want %v", got, want)
	}
	if _, err := ks.VerifyText(older.signText(grant("orders", 3))); err != nil {
		t.Fatalf("older key: %v", err)
	}
}

func TestParseKeysetRefusesWhatIsNotAKey(t *testing.T) {
	v := loadVectors(t)
	good := vectorSigner(t, v, "active").publicText()
	for name, c := range map[string]struct{ text, want string }{
		"no text":          {"", "the keyset has no key"},
		"only comments":    {"# nothing\n\n  # here\n", "the keyset has no key"},
		"a key too short":  {good + "\n" + good[:42], "keyset line 2: an Ed25519 public key is 32 bytes"},
		"a key too long":   {good + "AA", "keyset line 1: an Ed25519 public key is 32 bytes"},
		"padding":          {good[:42] + "=", "keyset line 1: not base64url"},
		"standard base64":  {"+" + good[1:], "keyset line 1: not base64url"},
		"two keys a line":  {good + " " + good, "keyset line 1: an Ed25519 public key is 32 bytes"},
		"not on the curve": {"AgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "keyset line 1: not a valid Ed25519 public key"},
	} {
		t.Run(name, func(t *testing.T) {
			ks, err := fence.ParseKeyset(c.text)
			if err == nil {
				t.Fatalf("parsed: %v", ks.KeyIDs())
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %q, want it to start %q", err, c.want)
			}
		})
	}
}
