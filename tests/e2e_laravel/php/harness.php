<?php
// Boots Illuminate's container, database capsule and queue capsule (database driver) on a
// SQLite file — no full Laravel app — for the laravel_bridge interop tests.
//
//   php harness.php dispatch DB_PATH APP_KEY   → JSON lines {"case": …, "payload": …} of real dispatches
//   php harness.php encrypt CIPHER KEY TEXT     → Laravel's encryptString(TEXT)
//   php harness.php decrypt CIPHER KEY TOKEN    → Laravel's decryptString(TOKEN)
//   php harness.php run-command CIPHER KEY DB  → reads a payload JSON on stdin, resolves its
//                                                command as CallQueuedHandler does (models
//                                                restored from DB's users table), prints
//                                                json_encode of the object's properties
error_reporting(E_ALL & ~E_DEPRECATED);
require '/usr/share/php/Illuminate/autoload.php';
require_once '/usr/share/php/Carbon/autoload.php';
require_once __DIR__ . '/jobs.php';

use Illuminate\Container\Container;
use Illuminate\Database\Capsule\Manager as DB;
use Illuminate\Encryption\Encrypter;
use Illuminate\Queue\Capsule\Manager as Queue;

function key_bytes(string $key): string {
    return str_starts_with($key, 'base64:') ? base64_decode(substr($key, 7)) : $key;
}

function boot(string $dbPath, string $appKey): array {
    $container = new Container;
    Container::setInstance($container);
    $db = new DB($container);
    $db->addConnection(['driver' => 'sqlite', 'database' => $dbPath]);
    $db->setAsGlobal();
    $db->bootEloquent();
    $container['db'] = $db->getDatabaseManager();
    $schema = DB::schema();
    if (! $schema->hasTable('users')) {
        $schema->create('users', function ($t) { $t->bigIncrements('id'); $t->string('name'); });
        DB::table('users')->insert(['id' => 7, 'name' => 'Ada']);
    }
    if (! $schema->hasTable('jobs')) {
        $schema->create('jobs', function ($t) {
            $t->bigIncrements('id'); $t->string('queue')->index(); $t->longText('payload');
            $t->unsignedTinyInteger('attempts'); $t->unsignedInteger('reserved_at')->nullable();
            $t->unsignedInteger('available_at'); $t->unsignedInteger('created_at');
        });
    }
    $container->instance(Illuminate\Contracts\Encryption\Encrypter::class,
        new Encrypter(key_bytes($appKey), 'AES-256-CBC'));
    $queue = new Queue($container);
    $queue->addConnection(['driver' => 'database', 'table' => 'jobs', 'queue' => 'default',
        'retry_after' => 90]);
    $queue->setAsGlobal();
    return [$db, $queue];
}

$cmd = $argv[1] ?? '';
if ($cmd === 'dispatch') {
    [$db, $queue] = boot($argv[2], $argv[3]);
    foreach (\App\Jobs\job_cases() as $case => $job) {
        DB::table('jobs')->delete();
        // Illuminate\Bus\Dispatcher::pushCommandToQueue, as dispatch() does it:
        $q = Queue::connection();
        if (isset($job->queue, $job->delay)) { $q->laterOn($job->queue, $job->delay, $job); }
        elseif (isset($job->queue)) { $q->pushOn($job->queue, $job); }
        elseif (isset($job->delay)) { $q->later($job->delay, $job); }
        else { $q->push($job); }
        $row = DB::table('jobs')->first();
        echo json_encode(['case' => $case, 'payload' => $row->payload, 'queue' => $row->queue,
            'available_delay' => $row->available_at - $row->created_at]), "\n";
    }
} elseif ($cmd === 'encrypt') {
    echo (new Encrypter(key_bytes($argv[3]), $argv[2]))->encryptString($argv[4]);
} elseif ($cmd === 'decrypt') {
    echo (new Encrypter(key_bytes($argv[3]), $argv[2]))->decryptString($argv[4]);
} elseif ($cmd === 'run-command') {
    boot($argv[4], $argv[3]);
    $container = Container::getInstance();
    $container->instance(Illuminate\Contracts\Encryption\Encrypter::class,
        new Encrypter(key_bytes($argv[3]), $argv[2]));
    $payload = json_decode(stream_get_contents(STDIN), true);
    // Illuminate\Queue\CallQueuedHandler::getCommand, verbatim in effect:
    $data = $payload['data'];
    $command = str_starts_with($data['command'], 'O:')
        ? unserialize($data['command'])
        : unserialize($container[Illuminate\Contracts\Encryption\Encrypter::class]->decrypt($data['command']));
    $props = [];
    foreach ((new ReflectionObject($command))->getProperties() as $p) {
        $p->setAccessible(true);
        $v = $p->getValue($command);
        if ($v instanceof DateTimeInterface) {
            $v = get_class($v) . ' ' . $v->format('Y-m-d H:i:s.u e');
        } elseif ($v instanceof Illuminate\Database\Eloquent\Model) {
            $v = ['model' => get_class($v), 'attributes' => $v->getAttributes()];
        }
        $props[$p->getName()] = $v;
    }
    echo json_encode(['class' => get_class($command), 'props' => $props]);
} else {
    fwrite(STDERR, "usage: harness.php dispatch|encrypt|decrypt|run-command …\n");
    exit(2);
}
