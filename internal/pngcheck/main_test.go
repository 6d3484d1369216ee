package main

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// page is a white w×h image with a red and a green block of n pixels each.
func page(w, h, n int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.White)
		}
	}
	for i := range n {
		img.Set(i%w, i/w, color.RGBA{0xd6, 0x27, 0x28, 0xff})
		img.Set(i%w, h-1-i/w, color.RGBA{0x2e, 0x9e, 0x44, 0xff})
	}
	return img
}

func check(t *testing.T, img image.Image, args ...string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shot.png")
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	code := run(append(args, path), &out, &errs)
	return code, out.String() + errs.String()
}

func TestPassesAPageWithItsColours(t *testing.T) {
	code, out := check(t, page(100, 50, 600), "-size", "100x50", "-ink", "0.2", "-color", "fenced=#d62728:500", "-color", "ok=2e9e44:500")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestFailsBlankWrongSizeAndMissingColours(t *testing.T) {
	for _, c := range []struct {
		name string
		img  image.Image
		args []string
		want string
	}{
		{"blank", page(100, 50, 0), []string{"-ink", "0.01"}, "blank"},
		{"size", page(100, 50, 600), []string{"-size", "1400x1800"}, "size 100x50, want 1400x1800"},
		{"colour", page(100, 50, 100), []string{"-color", "fenced=d62728:500"}, "fenced (#d62728): 100 pixels, want at least 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := check(t, c.img, c.args...)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 with %q:\n%s", code, c.want, out)
			}
		})
	}
}

func TestFailsWhatIsNotAPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shot.png")
	if err := os.WriteFile(path, []byte("<html></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run([]string{path}, &out, &out); code != 1 || !strings.Contains(out.String(), "not a PNG") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if code := run([]string{"-color", "red", path}, &out, &out); code != 2 {
		t.Fatalf("a bad -color: exit %d, want 2", code)
	}
}
