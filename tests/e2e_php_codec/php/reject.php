<?php
// Does PHP's unserialize() accept each input? Reads JSON lines {"b64": ...} on
// stdin, prints {"accepted": bool, "reserialized": base64|null} per line.
// Warnings are silenced: only the result matters.
require __DIR__ . '/bootstrap.php';

while (($line = fgets(STDIN)) !== false) {
    if (trim($line) === '') {
        continue;
    }
    $data = base64_decode(json_decode($line, true, 512, JSON_THROW_ON_ERROR)['b64'], true);
    try {
        $value = @unserialize($data);
        $accepted = $value !== false || $data === 'b:0;';
    } catch (Throwable $e) {
        $accepted = false;
    }
    emit(['accepted' => $accepted, 'reserialized' => $accepted ? base64_encode(serialize($value)) : null]);
}
