// Command pngcheck checks a screenshot: that it decodes as a PNG of the
// expected size, that it is not blank (enough pixels differ from its
// background, its most common colour), and that it shows each of the
// given colours in at least the given number of pixels. `make html-check`
// runs it on the screenshot of cmd/simulate's HTML page.
//
//	go run ./internal/pngcheck -size 1400x1800 -ink 0.05 -color fenced=d62728:150 FILE.png
//
// It exits 0 when every check passes, 1 when one fails (each failure on a
// line), and 2 on a usage error.
package main

import (
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"strconv"
	"strings"
)

// colorWant is a colour the image must show in at least min pixels.
type colorWant struct {
	name string
	c    color.RGBA
	min  int
}

type colorList []colorWant

func (l *colorList) String() string {
	var s []string
	for _, c := range *l {
		s = append(s, fmt.Sprintf("%s=%02x%02x%02x:%d", c.name, c.c.R, c.c.G, c.c.B, c.min))
	}
	return strings.Join(s, " ")
}

// Set parses NAME=RRGGBB:MIN (a leading # is allowed).
func (l *colorList) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	hex, n, ok2 := strings.Cut(rest, ":")
	hex = strings.TrimPrefix(hex, "#")
	if !ok || !ok2 || name == "" || len(hex) != 6 {
		return fmt.Errorf("want NAME=RRGGBB:MIN, got %q", v)
	}
	rgb, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return fmt.Errorf("colour %q: %v", hex, err)
	}
	least, err := strconv.Atoi(n)
	if err != nil || least < 1 {
		return fmt.Errorf("minimum %q: want a positive number of pixels", n)
	}
	*l = append(*l, colorWant{name, color.RGBA{uint8(rgb >> 16), uint8(rgb >> 8), uint8(rgb), 0xff}, least})
	return nil
}

// spec is what the image must be.
type spec struct {
	width, height int
	ink           float64 // the least fraction of pixels off the background
	tolerance     int     // per channel, for a colour to match
	colors        colorList
}

// report is what was found.
type report struct {
	width, height int
	background    color.RGBA
	ink           float64
	counts        []int // per wanted colour
}

func measure(img image.Image, s spec) report {
	b := img.Bounds()
	r := report{width: b.Dx(), height: b.Dy(), counts: make([]int, len(s.colors))}
	hist := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			hist[c]++
			for i, w := range s.colors {
				if near(c, w.c, s.tolerance) {
					r.counts[i]++
				}
			}
		}
	}
	most := -1
	for c, n := range hist {
		if n > most || (n == most && less(c, r.background)) {
			r.background, most = c, n
		}
	}
	off := 0
	for c, n := range hist {
		if !near(c, r.background, s.tolerance) {
			off += n
		}
	}
	if total := r.width * r.height; total > 0 {
		r.ink = float64(off) / float64(total)
	}
	return r
}

// less orders colours, so the background is chosen deterministically.
func less(a, b color.RGBA) bool {
	return uint32(a.R)<<24|uint32(a.G)<<16|uint32(a.B)<<8|uint32(a.A) < uint32(b.R)<<24|uint32(b.G)<<16|uint32(b.B)<<8|uint32(b.A)
}

func near(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) bool { return abs(int(x)-int(y)) <= tol }
	return d(a.R, b.R) && d(a.G, b.G) && d(a.B, b.B)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// failures are the checks r does not pass.
func failures(r report, s spec) []string {
	var out []string
	if (s.width > 0 && r.width != s.width) || (s.height > 0 && r.height != s.height) {
		out = append(out, fmt.Sprintf("size %dx%d, want %dx%d", r.width, r.height, s.width, s.height))
	}
	if r.ink < s.ink {
		out = append(out, fmt.Sprintf("blank: %.2f%% of the pixels differ from the background #%02x%02x%02x, want at least %.2f%%",
			100*r.ink, r.background.R, r.background.G, r.background.B, 100*s.ink))
	}
	for i, w := range s.colors {
		if r.counts[i] < w.min {
			out = append(out, fmt.Sprintf("%s (#%02x%02x%02x): %d pixels, want at least %d", w.name, w.c.R, w.c.G, w.c.B, r.counts[i], w.min))
		}
	}
	return out
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pngcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s spec
	size := fs.String("size", "", "the expected size, WIDTHxHEIGHT (empty: any)")
	fs.Float64Var(&s.ink, "ink", 0.05, "the least fraction of pixels that differ from the background")
	fs.IntVar(&s.tolerance, "tolerance", 12, "how far each channel may be from a colour to match it")
	fs.Var(&s.colors, "color", "NAME=RRGGBB:MIN: the image shows the colour in at least MIN pixels (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pngcheck [flags] FILE.png")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if *size != "" {
		w, h, ok := strings.Cut(*size, "x")
		var err1, err2 error
		s.width, err1 = strconv.Atoi(w)
		s.height, err2 = strconv.Atoi(h)
		if !ok || err1 != nil || err2 != nil {
			fmt.Fprintf(stderr, "pngcheck: -size %q: want WIDTHxHEIGHT\n", *size)
			return 2
		}
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "pngcheck: %v\n", err)
		return 1
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		fmt.Fprintf(stderr, "pngcheck: %s: not a PNG: %v\n", path, err)
		return 1
	}
	r := measure(img, s)
	var found []string
	for i, w := range s.colors {
		found = append(found, fmt.Sprintf("%s %d px", w.name, r.counts[i]))
	}
	fmt.Fprintf(stdout, "pngcheck: %s: %dx%d, %.1f%% ink on #%02x%02x%02x; %s\n", path, r.width, r.height, 100*r.ink,
		r.background.R, r.background.G, r.background.B, strings.Join(found, ", "))
	fails := failures(r, s)
	for _, f := range fails {
		fmt.Fprintf(stderr, "pngcheck: %s: %s\n", path, f)
	}
	if len(fails) > 0 {
		return 1
	}
	return 0
}
