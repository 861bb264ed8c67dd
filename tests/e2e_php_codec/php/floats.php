<?php
// serialize() of doubles given by Python: reads one 16-hex-digit big-endian
// IEEE 754 double per line on stdin, prints {"hex": ..., "b64": ...} per line.
require __DIR__ . '/bootstrap.php';

while (($line = fgets(STDIN)) !== false) {
    $hex = trim($line);
    if ($hex === '') {
        continue;
    }
    $d = unpack('E', hex2bin($hex))[1];
    emit(['hex' => $hex, 'b64' => base64_encode(serialize($d))]);
}
