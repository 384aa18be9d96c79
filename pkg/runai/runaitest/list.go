package runaitest

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Filter fields each list accepts (the vendor's filterBy patterns).
var (
	nodePoolFields   = []string{"name", "clusterId", "phase"}
	departmentFields = []string{"name", "clusterId", "totalGpuQuota", "gpuAllocated", "createdAt"}
	projectFields    = []string{"name", "clusterId", "departmentId", "parentId", "parentName", "phase", "totalGpuQuota", "gpuAllocated", "createdAt"}
	numericFields    = map[string]bool{"totalGpuQuota": true, "gpuAllocated": true}
)

// filterRE is the vendor's "field operator value" grammar.
var filterRE = regexp.MustCompile(`^([A-Za-z0-9]+)(==|!=|<=|>=|=@|!@|=\^|=\$)(.+)$`)

type filter struct{ field, op, value string }

type filters []filter

// parseFilters reads filterBy. The vendor declares it explode:false (one
// parameter, comma-separated), but clients also repeat the parameter; both
// forms are accepted and combine with AND.
func parseFilters(params []string, allowed []string) (filters, error) {
	var out filters
	for _, p := range params {
		for _, part := range strings.Split(p, ",") {
			if part == "" {
				continue
			}
			m := filterRE.FindStringSubmatch(part)
			if m == nil {
				return nil, fmt.Errorf("filterBy %q: want <field><op><value> with op one of == != <= >= =@ !@ =^ =$", part)
			}
			if !slices.Contains(allowed, m[1]) {
				return nil, fmt.Errorf("filterBy %q: unknown field %q (allowed: %s)", part, m[1], strings.Join(allowed, ", "))
			}
			out = append(out, filter{field: m[1], op: m[2], value: m[3]})
		}
	}
	return out, nil
}

func (fs filters) match(values map[string]string) bool {
	for _, f := range fs {
		if !f.match(values[f.field]) {
			return false
		}
	}
	return true
}

func (f filter) match(v string) bool {
	if numericFields[f.field] {
		a, errA := strconv.ParseFloat(v, 64)
		b, errB := strconv.ParseFloat(f.value, 64)
		if errA == nil && errB == nil {
			switch f.op {
			case "==":
				return a == b
			case "!=":
				return a != b
			case "<=":
				return a <= b
			case ">=":
				return a >= b
			}
		}
	}
	switch f.op {
	case "==":
		return v == f.value
	case "!=":
		return v != f.value
	case "<=":
		return v <= f.value
	case ">=":
		return v >= f.value
	case "=@":
		return strings.Contains(v, f.value)
	case "!@":
		return !strings.Contains(v, f.value)
	case "=^":
		return strings.HasPrefix(v, f.value)
	case "=$":
		return strings.HasSuffix(v, f.value)
	}
	return false
}

func matchSearch(search, name string) bool {
	return search == "" || strings.Contains(strings.ToLower(name), strings.ToLower(search))
}

// sortItems applies sortBy (name, createdAt/id, totalGpuQuota) and sortOrder.
// The default order is creation order, which keeps paging stable.
func sortItems[T any](items []T, q map[string][]string, key func(T) (name, id string, quota float64)) error {
	by, order := first(q["sortBy"]), first(q["sortOrder"])
	if order != "" && order != "asc" && order != "desc" {
		return fmt.Errorf("sortOrder %q: want asc or desc", order)
	}
	var c func(a, b T) int
	switch by {
	case "", "createdAt", "id":
		c = func(a, b T) int {
			_, ai, _ := key(a)
			_, bi, _ := key(b)
			an, _ := strconv.Atoi(ai)
			bn, _ := strconv.Atoi(bi)
			return cmp.Compare(an, bn)
		}
	case "name":
		c = func(a, b T) int { an, _, _ := key(a); bn, _, _ := key(b); return strings.Compare(an, bn) }
	case "totalGpuQuota":
		c = func(a, b T) int { _, _, aq := key(a); _, _, bq := key(b); return cmp.Compare(aq, bq) }
	default:
		return fmt.Errorf("sortBy %q: the simulator sorts by name, createdAt or totalGpuQuota", by)
	}
	slices.SortStableFunc(items, c)
	if order == "desc" {
		slices.Reverse(items)
	}
	return nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

type pageRange struct{ from, to int }

// pageLocked applies offset and limit. limit defaults to 50 and must be
// 1..500 like the vendor's; the seed's MaxPageSize may cap it further. next
// is the offset of the following page, nil on the last page.
func (s *Server) pageLocked(r *http.Request, n int) (pageRange, *int, error) {
	q := r.URL.Query()
	offset, limit := 0, DefaultPageSize
	if v := q.Get("offset"); v != "" {
		o, err := strconv.Atoi(v)
		if err != nil || o < 0 {
			return pageRange{}, nil, fmt.Errorf("offset %q: want an integer >= 0", v)
		}
		offset = o
	}
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > MaxPageSize {
			return pageRange{}, nil, fmt.Errorf("limit %q: want an integer from 1 to %d", v, MaxPageSize)
		}
		limit = l
	}
	limit = min(limit, s.seed.MaxPageSize)
	from := min(offset, n)
	to := min(from+limit, n)
	if to < n {
		next := to
		return pageRange{from, to}, &next, nil
	}
	return pageRange{from, to}, nil, nil
}
