package qpack_test

import (
	"slices"
	"testing"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/verify"
)

// TestRecordNames: the receipt verify-install writes into a container is
// one of the files a replaceable container may hold besides its own.
func TestRecordNames(t *testing.T) {
	if !slices.Contains(qpack.RecordNames, verify.ReceiptName) {
		t.Errorf("qpack.RecordNames %v lacks verify's receipt %s: a verified container could not be replaced", qpack.RecordNames, verify.ReceiptName)
	}
}
