package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxHead bounds an HTTP head ReadHead reads.
const MaxHead = 16 << 10

// ReadHead reads an HTTP response head, its status line and header
// lines up to the empty line, from br, and returns it byte for byte as
// it came, with the response it parses to (whose Body reads nothing: the
// body, if any, is still in br). A relay writes the head on unchanged, so
// that its client reads what the server wrote.
func ReadHead(br *bufio.Reader) ([]byte, *http.Response, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) && len(head) <= MaxHead {
				continue
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return head, nil, fmt.Errorf("wire: reading an HTTP head: %w", err)
		}
		if len(head) > MaxHead {
			return head, nil, fmt.Errorf("wire: an HTTP head over %d bytes", MaxHead)
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			break
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return head, nil, fmt.Errorf("wire: reading an HTTP head: %w", err)
	}
	resp.Body = http.NoBody
	return head, resp, nil
}
