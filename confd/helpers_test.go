package confd

import "time"

// testNow is the clock of the tests: the salt of the golden requests.
var testNow = time.Unix(1700000000, 0)
