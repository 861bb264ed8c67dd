<?php
// The corpus: PHP's own serialize() output for many values, one JSON line per
// case: {"name": ..., "b64": base64(serialize($value))}. Serialization is done
// right where each value is built so that PHP references (&) survive.
//
// Usage: php corpus.php [RANDOM_DOUBLES] [SEED]
require __DIR__ . '/bootstrap.php';

use App\Bridge;

$randomDoubles = (int) ($argv[1] ?? 2000);
mt_srand((int) ($argv[2] ?? 20240611));

$cases = [];
function add(string $name, string $serialized): void
{
    global $cases;
    if (isset($cases[$name])) {
        throw new LogicException("duplicate case $name");
    }
    $cases[$name] = $serialized;
}

// -- scalars -------------------------------------------------------------------
add('null', serialize(null));
add('true', serialize(true));
add('false', serialize(false));
foreach ([0, 1, -1, 42, -42, 255, 65536, 2 ** 31, -(2 ** 31), 2 ** 53 + 1, PHP_INT_MAX, PHP_INT_MIN,
          PHP_INT_MAX - 1, PHP_INT_MIN + 1] as $i) {
    add("int $i", serialize($i));
}
$floats = [
    '0.1' => 0.1, '3.0' => 3.0, '0.0' => 0.0, '-0.0' => -0.0, 'INF' => INF, '-INF' => -INF,
    'NAN' => NAN, '1e15' => 1e15, '1e16' => 1e16, '1e17' => 1e17, '1e18' => 1e18, '1e22' => 1e22,
    '1e-5' => 1e-5, '0.0001' => 0.0001, '0.001' => 0.001, '5e-324' => 5e-324,
    'PHP_FLOAT_MIN' => PHP_FLOAT_MIN, 'PHP_FLOAT_MAX' => PHP_FLOAT_MAX,
    '-PHP_FLOAT_MAX' => -PHP_FLOAT_MAX, 'PHP_FLOAT_EPSILON' => PHP_FLOAT_EPSILON, '1/3' => 1 / 3,
    '2/3' => 2 / 3, '-1.5' => -1.5, '2**53' => 2.0 ** 53, '2**63' => 2.0 ** 63, '2**64' => 2.0 ** 64,
    '123456789012345678.0' => 123456789012345678.0, '99999999999999990.0' => 99999999999999990.0,
    '0.30000000000000004' => 0.1 + 0.2, '1e300*10' => 1e300 * 10, 'pi' => M_PI, 'e' => M_E,
    '100.0' => 100.0, '1.0E+25' => 1.0E+25, '-1e-7' => -1e-7, '12345.678' => 12345.678,
];
foreach ($floats as $name => $f) {
    add("float $name", serialize($f));
}
// Random doubles over every exponent: 8 random bytes (seeded), NaNs skipped
// (PHP writes every NaN payload as NAN).
for ($n = 0; $n < $randomDoubles; ) {
    $bytes = '';
    for ($b = 0; $b < 8; $b++) {
        $bytes .= chr(mt_rand(0, 255));
    }
    $d = unpack('e', $bytes)[1];
    if (is_nan($d)) {
        continue;
    }
    add(sprintf('random double %04d %s', $n, bin2hex(pack('E', $d))), serialize($d));
    $n++;
}

// -- strings -------------------------------------------------------------------
$strings = [
    'empty' => '', 'ascii' => 'hello', 'utf8' => "héllo wörld — ✓ 日本語 🎉",
    'invalid utf8' => "\xff\xfe\x80abc\xc3", 'nul bytes' => "a\0b\0\0c", 'only nul' => "\0",
    'quotes' => 'say "hi"; it\'s {ok}', 'serialize-looking' => 's:3:"abc";a:1:{i:0;N;}',
    'newlines' => "line1\nline2\r\n\ttab", 'binary 0-255' => implode('', array_map('chr', range(0, 255))),
    'long' => str_repeat('x', 100000), 'overlong utf8' => "\xc0\xaf", 'surrogate utf8' => "\xed\xa0\x80",
    'bom' => "\xef\xbb\xbfbom", 'digits' => '12345', 'float text' => '1.5E+3',
];
foreach ($strings as $name => $s) {
    add("string $name", serialize($s));
}

// -- arrays --------------------------------------------------------------------
add('array empty', serialize([]));
add('array list', serialize([1, 'two', 3.0, null, true]));
add('array map', serialize(['a' => 1, 'b' => 'x', 'c' => [1, 2]]));
add('array mixed keys', serialize([0 => 'a', 'k' => 'b', 1 => 'c', '10' => 'd', '-5' => 'e', '05' => 'f']));
add('array sparse', serialize([0 => 'a', 2 => 'c', 5 => 'f']));
add('array reversed keys', serialize([1 => 'b', 0 => 'a']));
add('array starts at 1', serialize([1 => 'a', 2 => 'b']));
add('array negative keys', serialize([-1 => 'a', -2 => 'b', PHP_INT_MIN => 'min', PHP_INT_MAX => 'max']));
add('array unset hole', (function () { $a = [1, 2, 3]; unset($a[1]); return serialize($a); })());
add('array nested', serialize([[[]], ['x' => ['y' => ['z' => [1, [2, [3]]]]]], [[], [[]]]]));
add('array binary keys', serialize(["\xff" => 1, "\0" => 2, '' => 3, 'é' => 4, "a\0b" => 5]));
add('array big', serialize(range(0, 999)));
add('array of floats', serialize([0.1, -0.0, INF, NAN, 1e100]));
add('array deep 500', serialize(array_reduce(range(1, 500), fn ($carry) => [$carry], 'leaf')));

// -- objects -------------------------------------------------------------------
$o = new stdClass();
add('stdClass empty', serialize($o));
$o = new stdClass();
$o->a = 1;
$o->b = [1, 2];
$o->{'0'} = 'numeric name';
$o->{'with space'} = 'x';
add('stdClass props', serialize($o));
add('object cast from list', serialize((object) ['a', 'b']));
add('Point', serialize(new Bridge\Point(1, 'two', [3])));
add('Point nested', serialize(new Bridge\Point(new Bridge\Point(), null, new stdClass())));
add('Child same-named private props', serialize(new Bridge\Child()));
add('Base', serialize(new Bridge\Base()));
add('Typed with uninitialized prop', serialize(new Bridge\Typed()));
add('Magic __serialize int keys', serialize(new Bridge\Magic()));
$bag = new Bridge\Bag();
$bag->dynamic = 'yes';
add('Bag dynamic props', serialize($bag));
add('Legacy Serializable C:', serialize(new Bridge\Legacy(['k' => 'v', 'n' => 1])));
add('Legacy Serializable empty', serialize(new Bridge\Legacy()));
add('Legacy nested in array', serialize([new Bridge\Legacy('a'), new Bridge\Legacy([new Bridge\Point()])]));
$legacy = new Bridge\Legacy('shared');
add('Legacy same object twice', serialize([$legacy, $legacy]));
add('ArrayObject', serialize(new ArrayObject(['x' => 1, 2])));
add('SplObjectStorage', (function () {
    $s = new SplObjectStorage();
    $k = new stdClass();
    $s[$k] = 'data';
    return serialize([$s, $k]);
})());
add('Exception', serialize(new RuntimeException('boom', 7)));

// -- enums ---------------------------------------------------------------------
add('enum pure', serialize(Bridge\Status::Active));
add('enum backed string', serialize(Bridge\Suit::Hearts));
add('enum backed int', serialize(Bridge\Level::High));
add('enum repeated in list', serialize([Bridge\Suit::Hearts, Bridge\Suit::Hearts, Bridge\Status::Active,
    Bridge\Suit::Spades, Bridge\Status::Active, Bridge\Suit::Hearts]));
add('enum inside objects', serialize([new Bridge\Point(Bridge\Suit::Hearts), new Bridge\Point(Bridge\Suit::Hearts)]));

// -- identity and references -----------------------------------------------------
$shared = new Bridge\Point();
add('same object twice (r:)', serialize([$shared, $shared, 'x' => $shared]));
$a = new Bridge\Node('a');
$b = new Bridge\Node('b');
$a->next = $b;
$b->next = $a;
add('object cycle a-b-a (r:)', serialize($a));
$self = new Bridge\Node('self');
$self->next = $self;
add('self-referencing object (r:)', serialize($self));
$x = 1;
$arr = [&$x, &$x, 'y' => &$x];
add('reference to int (R:)', serialize($arr));
$s = 'str';
$arr = ['a' => &$s, 'b' => 'other', 'c' => &$s];
add('reference to string (R:)', serialize($arr));
$obj = new Bridge\Point();
$arr = [$obj, &$obj, $obj];
add('object then reference (r: and R:)', serialize($arr));
$inner = [1, 2];
$arr = [&$inner, &$inner];
add('reference to array (R:)', serialize($arr));
$inner = ['k' => 1, 'j' => [2]];
$arr = [&$inner, &$inner];
add('reference to map array (R:)', serialize($arr));
$o = new stdClass();
$o->p = 5;
$o->q = &$o->p;
add('reference between properties (R:)', serialize($o));
$obj = new stdClass();
$arr = [&$obj, &$obj, $obj];
add('reference then object copy (R: r:)', serialize($arr));
$arr = ['x' => [1]];
$arr['x'][1] = &$arr['x'];
add('reference to enclosing array, map (R:)', serialize($arr));
$arr = [[1]];
$arr[0][1] = &$arr[0];
add('reference to enclosing array, list (R:)', serialize($arr));
$o = new stdClass();
$o->self = &$o;
add('object property referencing the object (R:1)', serialize($o));

// -- dates and Laravel -------------------------------------------------------------
$tz = new DateTimeZone('Europe/Paris');
add('DateTime', serialize(new DateTime('2024-02-29 13:14:15.123456', $tz)));
add('DateTimeImmutable UTC', serialize(new DateTimeImmutable('1970-01-01 00:00:00', new DateTimeZone('UTC'))));
add('DateTimeZone', serialize($tz));
add('DateInterval', serialize(new DateInterval('P1Y2M3DT4H5M6S')));
if (class_exists(\Carbon\Carbon::class)) {
    add('Carbon', serialize(\Carbon\Carbon::create(2024, 1, 2, 3, 4, 5.678, 'Europe/Paris')));
    add('CarbonImmutable', serialize(\Carbon\CarbonImmutable::create(2000, 12, 31, 23, 59, 59, 'UTC')));
}
if (class_exists(\Illuminate\Support\Carbon::class)) {
    add('Illuminate Carbon', serialize(\Illuminate\Support\Carbon::create(2021, 6, 1, 0, 0, 0, 'UTC')));
}
if (class_exists(\App\Jobs\ProcessPodcast::class)) {
    $job = new \App\Jobs\ProcessPodcast(42, ['quality' => 'high', 'tags' => ['a', 'b']], "s\0cret");
    add('Laravel job', serialize($job));
    $job = new \App\Jobs\ProcessPodcast(7, [Bridge\Suit::Spades], 'tok');
    $job->onQueue('podcasts')->onConnection('database')->delay(
        \Illuminate\Support\Carbon::create(2030, 1, 1, 12, 0, 0, 'UTC')
    );
    $job->chain([new \App\Jobs\ProcessPodcast(8, [], 't2')]);
    add('Laravel job queued with delay and chain', serialize($job));
}

foreach ($cases as $name => $serialized) {
    emit(['name' => $name, 'b64' => base64_encode($serialized)]);
}
