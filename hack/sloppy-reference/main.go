// Command sloppy-reference prints how kube-proxy v1.37.2's parsers read each text of a corpus:
// k8s.io/utils/net ParseIPSloppy and ParseCIDRSloppy (at the version kubernetes v1.37.2 pins),
// then IPFamilyOf / IPFamilyOfCIDR, IP.String / IPNet.String and proxyutil.IsZeroCIDR (and
// strings.TrimSpace first, as for loadBalancerSourceRanges). Reads a
// JSON list of strings on stdin, writes a JSON list of answers on stdout: the reference the
// Python port (nftproxy/model/sloppy.py) is tested against (tests/unit/test_address_spellings.py).
package main

import (
	"encoding/json"
	"os"
	"strings"

	netutils "k8s.io/utils/net"
)

type answer struct {
	Text   string  `json:"text"`
	IP     *string `json:"ip"`      // IP.String(), null: ParseIPSloppy returned nil
	Family string  `json:"family"`  // IPFamilyOf: "4", "6" or ""
	CIDR   *string `json:"cidr"`    // IPNet.String() of ParseCIDRSloppy, null: an error
	CFam   string  `json:"cfamily"` // IPFamilyOfCIDR
	Zero   bool    `json:"zero"`    // proxyutil.IsZeroCIDR: the mask's ones == 0
	// ParseCIDRSloppy(strings.TrimSpace(text)): how kube-proxy reads a loadBalancerSourceRange
	Trimmed *string `json:"trimmed_cidr"`
}

func main() {
	var texts []string
	if err := json.NewDecoder(os.Stdin).Decode(&texts); err != nil {
		panic(err)
	}
	out := make([]answer, 0, len(texts))
	for _, t := range texts {
		a := answer{Text: t}
		if ip := netutils.ParseIPSloppy(t); ip != nil {
			s := ip.String()
			a.IP, a.Family = &s, string(netutils.IPFamilyOf(ip))
		}
		if _, n, err := netutils.ParseCIDRSloppy(t); err == nil {
			s := n.String()
			ones, _ := n.Mask.Size()
			a.CIDR, a.CFam, a.Zero = &s, string(netutils.IPFamilyOfCIDR(n)), ones == 0
		}
		if _, n, err := netutils.ParseCIDRSloppy(strings.TrimSpace(t)); err == nil {
			s := n.String()
			a.Trimmed = &s
		}
		out = append(out, a)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
